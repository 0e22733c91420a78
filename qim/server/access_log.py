"""daphne's access log, the same lines written with the date formatted once a second.

daphne's `AccessLogGenerator` makes a `datetime.now()` and runs `strftime` for every line:
two or three lines per WebSocket (connecting, connected, disconnected), each formatting the
same second again during a reconnect storm (docs/performance.md,
"Lean handshake, upgrade, frame and per-socket paths"). The log stays on by default
(docs/operations.md §2.3); the lines keep daphne's NCSA-like format byte for byte:
`host ident user [date] "request" status length`."""

from __future__ import annotations

import time
from typing import Any, TextIO

from qim.server.patching import patch_once

# daphne's format and its date format (daphne/access.py `write_entry`), in local time.
LINE = '%s %s %s [%s] "%s" %s %s\n'
DATE = "%d/%b/%Y:%H:%M:%S"
# The WebSocket actions daphne logs, and the word each line's request starts with.
WEBSOCKET_WORDS = {"connecting": "WSCONNECTING", "rejected": "WSREJECT",
                   "connected": "WSCONNECT", "disconnected": "WSDISCONNECT"}


class SecondStamp:
    """The date of the current second as daphne writes it, formatted when the second changes."""

    __slots__ = ("second", "text")

    def __init__(self) -> None:
        self.second, self.text = -1, ""

    def now(self) -> str:
        second = int(time.time())
        if second != self.second:
            self.second, self.text = second, time.strftime(DATE, time.localtime(second))
        return self.text


def log_action(self: Any, protocol: str, action: str, details: dict[str, Any]) -> None:
    """daphne's `AccessLogGenerator.__call__`: one line for a finished HTTP request and for
    each WebSocket step; anything else writes nothing, as in daphne."""
    if protocol == "http" and action == "complete":
        request, status, length = "%(method)s %(path)s" % details, details["status"], details["size"]
    elif protocol == "websocket" and action in WEBSOCKET_WORDS:
        request, status, length = f"{WEBSOCKET_WORDS[action]} {details['path']}", None, None
    else:
        return
    stream: TextIO = self.stream
    stream.write(LINE % (details["client"], "-", "-", _stamp.now(), request, status or "-", length or "-"))


_stamp = SecondStamp()


def install() -> bool:
    """Once, at start-up, on daphne's generator class (qim/asgi.py); answers whether it did."""
    from daphne.access import AccessLogGenerator

    return patch_once(AccessLogGenerator, "qim_second_stamp", __call__=log_action)
