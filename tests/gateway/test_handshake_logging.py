"""autobahn's log arguments (its configuration's pformat, hltype and hlval of methods and
values) are formatted only when a log line is written (qim/gateway/handshake.py): a written
line says what autobahn's own functions said, a dropped debug line formats nothing, and
autobahn's `Timings` still prints. Real autobahn, txaio and Twisted logging in this process;
the nodes' sockets through the same code are covered by tests/gateway/test_lean_socket.py."""

from __future__ import annotations

from typing import Any

import autobahn.twisted.websocket as twisted_websocket
import autobahn.websocket.protocol as protocol
import txaio
from autobahn.util import hltype, hlval
from twisted.logger import formatEvent

from qim.gateway.handshake import DeferredText, install

txaio.use_twisted()
install()
install()  # a second call changes nothing


def test_a_written_line_says_what_autobahn_would_have_said() -> None:
    attrs = [("openHandshakeTimeout", 5, "WebSocketServerFactory"), ("maxMessagePayloadSize", 1048576, "x")]
    written = formatEvent({"log_format": "\n{attrs} {func} {peer}", "attrs": protocol.pformat(attrs),
                           "func": twisted_websocket.hltype(install), "peer": protocol.hlval("tcp:127.0.0.1:1")})
    assert written == f"\n{attrs!r} {hltype(install)} {hlval('tcp:127.0.0.1:1')}"
    assert str(protocol.hltype(install)) == hltype(install)  # one wrapper, not two
    assert f"{twisted_websocket.hlval(7, color='green'):>3}" == format(hlval(7, color="green"), ">3")


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


def test_timings_still_print() -> None:
    timings = protocol.Timings()
    timings.track("onOpen")
    assert "onOpen" in str(timings)
