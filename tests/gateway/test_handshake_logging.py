"""autobahn's log arguments cost nothing unless a line is written (qim/server/handshake.py):
its configuration's pformat becomes a repr made only when formatted, hltype and hlval give
the object itself. A written line still says what it is about, a dropped debug line formats
nothing, and autobahn's `Timings` still prints. Real autobahn, txaio and Twisted logging in
this process; the nodes' sockets through the same code: tests/gateway/test_lean_socket.py."""

from __future__ import annotations

from typing import Any

import autobahn.twisted.websocket as twisted_websocket
import autobahn.websocket.protocol as protocol
import txaio
from twisted.logger import formatEvent

from qim.server.handshake import DeferredText, install

txaio.use_twisted()
install()
install()  # a second call changes nothing


def test_a_written_line_says_what_it_is_about() -> None:
    attrs = [("openHandshakeTimeout", 5, "WebSocketServerFactory"), ("maxMessagePayloadSize", 1048576, "x")]
    written = formatEvent({"log_format": "\n{attrs} {func} peer={peer} {size:>4}", "attrs": protocol.pformat(attrs),
                           "func": twisted_websocket.hltype(install), "peer": protocol.hlval("tcp:127.0.0.1:1"),
                           "size": twisted_websocket.hlval(7, color="green", bold=False)})
    assert written == f"\n{attrs!r} {install} peer=tcp:127.0.0.1:1    7"
    assert f"{protocol.pformat({'a': 1}):>10}" == "  {'a': 1}"


def test_a_dropped_debug_line_formats_nothing() -> None:
    calls: list[Any] = []

    def formatter(value: Any) -> str:
        calls.append(value)
        return "formatted"

    log = txaio.make_logger()
    txaio.set_global_log_level("info")
    log.debug("{attrs}", attrs=DeferredText(formatter, "config"))
    assert calls == []
    assert str(DeferredText(formatter, "config")) == "formatted" and calls == ["config"]
    assert isinstance(protocol.pformat([1]), DeferredText)


def test_timings_still_print() -> None:
    timings = protocol.Timings()
    timings.track("onOpen")
    assert "onOpen" in str(timings)
