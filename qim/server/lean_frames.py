"""A client's plain text frame read without autobahn's per-frame machinery.

autobahn reads every inbound frame through about 25 Python calls (`processData`, a
`FrameHeader`, `onFrameBegin`, `onMessageBegin`, `onFrameData`, its incremental UTF-8 validator,
`onFrameEnd`, `onMessageEnd`, a `fire("message")` that gathers a DeferredList for listeners no
one registers), about 6 % of a node's CPU in a reconnect storm, whose AUTH, SYNC and ROOM_JOIN
are three such frames (docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths").

Almost every frame a client sends is one whole message: final, no reserved bits, text, masked,
under 1 KiB, already whole in the buffer. `read_plain_text_frame` delivers such a frame
exactly as autobahn would (the same traffic counters, its auto-ping restart, daphne's
`onMessage` with the same payload) when the socket is open and not inside a fragmented
message, no extension is in use and frames are not logged. Anything else is left to autobahn,
which then answers it as before: fragments, binary and control frames, a frame cut across reads,
invalid UTF-8 (1007), a frame or message over the limits (1009), extended lengths that are not
minimal, or frames of 1 KiB and more (autobahn's SIMD unmasking is faster there).
"""

from __future__ import annotations

from typing import Any

from autobahn.websocket.protocol import WebSocketProtocol

from qim.server.patching import patch_once
from qim.server.unmask import LARGE_FRAME, xor_masked

OPEN = WebSocketProtocol.STATE_OPEN
FINAL_TEXT = 0x81  # FIN, no RSV bits, opcode 1


def read_plain_text_frame(protocol: Any) -> bool | None:
    """Deliver the buffer's first frame if it is a plain text message (above) and answer what
    autobahn's `processData` answers, whether buffered bytes are left to process; None,
    nothing done, for any other frame."""
    data = protocol.data
    if len(data) < 6 or data[0] != FINAL_TEXT or not data[1] & 0x80:
        return None
    size = data[1] & 0x7F
    start = 6
    if size == 126:
        if len(data) < 8:
            return None
        size = (data[2] << 8) | data[3]
        if size < 126:  # not the minimal length: autobahn's protocol violation
            return None
        start = 8
    elif size == 127:
        return None
    end = start + size
    if size >= LARGE_FRAME or len(data) < end or over_limits(protocol, size):
        return None
    payload = xor_masked(data[start - 4:start], data[start:end])
    if protocol.utf8validateIncoming:
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError:
            return None  # autobahn fails the connection with 1007
    protocol.data = data[end:]
    stats = protocol.trafficStats
    stats.incomingOctetsWebSocketLevel += size
    stats.incomingOctetsAppLevel += size
    stats.incomingWebSocketFrames += 1
    stats.incomingWebSocketMessages += 1
    if protocol.autoPingTimeoutCall and protocol.autoPingRestartOnAnyTraffic:
        protocol._cancelAutoPingTimeoutCall()
    protocol._onMessage(payload, False)
    if protocol._listeners or protocol._parent is not None:
        protocol.fire("message", payload, is_binary=False)
    return len(protocol.data) > 0


def over_limits(protocol: Any, size: int) -> bool:
    frame_max, message_max = protocol.maxFramePayloadSize, protocol.maxMessagePayloadSize
    return (frame_max > 0 and size > frame_max) or (message_max > 0 and size > message_max)


def takes_frames(protocol: Any) -> bool:
    """Whether this socket's next frame may be read here: open, between messages, no
    extension, no frame logging, masks applied."""
    return (
        protocol.state == OPEN
        and protocol.current_frame is None
        and not protocol.inside_message
        and protocol._perMessageCompress is None
        and not protocol.failedByMe
        and not protocol.logFrames
        and protocol.applyMask
    )


def install() -> bool:
    """Once, at start-up, before the first socket (qim/asgi.py); whether it did."""
    from daphne.ws_protocol import WebSocketProtocol as DaphneWebSocketProtocol

    process_data = DaphneWebSocketProtocol.processData

    def processData(self: Any) -> bool:
        if takes_frames(self):
            more = read_plain_text_frame(self)
            if more is not None:
                return more
        return process_data(self)

    processData.__doc__ = process_data.__doc__
    return patch_once(DaphneWebSocketProtocol, "qim_lean_frames", processData=processData)
