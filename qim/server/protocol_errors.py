"""A WebSocket protocol violation is answered with a close frame, not a dropped connection.

autobahn's default (`failByDrop`, which daphne keeps) answers a frame that breaks RFC 6455 (an
unmasked client frame, RSV bits, a reserved opcode, invalid UTF-8, a message over the limit)
by aborting the TCP connection: the client sees a reset, no code, and whatever the server had
written but Twisted had not yet sent (a 101, a reply) is thrown away with it. With
`failByDrop` off, autobahn sends the close frame RFC 6455 §7.1.7 asks for (1002 protocol
error, 1007 invalid payload, 1009 too big) behind what was written, waits for the client's
close (its close handshake timeout) and then closes the socket: the client learns why, and
tuned and stock nodes send the same bytes (tests/server/test_differential.py).
"""

from __future__ import annotations

from typing import Any

from qim.server.patching import patch_once


def install() -> bool:
    """Once, at start-up, on daphne's WebSocket factory (qim/server/tuning.py); whether it did."""
    from daphne.ws_protocol import WebSocketFactory

    init = WebSocketFactory.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.setProtocolOptions(failByDrop=False)

    return patch_once(WebSocketFactory, "qim_close_on_protocol_errors", __init__=__init__)
