"""Pushes written straight to daphne's Twisted transport, framed once per batch.

Why (docs/performance.md, "Encode-once fan-out and direct socket writes"): on daphne, writing one frame
to one socket went through Channels, daphne's handle_reply, autobahn's framing and Twisted's
`transport.write`, which arms an asyncio writer (`loop.add_writer`, an epoll_ctl) that the
next loop iteration's `doWrite` sends from and disarms again: 70-85 % of the server's time
in a room fan-out, and a DM's EVENT queued behind each burst of 500 `doWrite` callbacks.
Server-to-client frames are unmasked (RFC 6455 §5.1), so one encoded frame fits every
socket; and when Twisted holds nothing for a socket, one `send()` puts the frame in the
kernel, as asyncio's own transports do; only what the kernel does not take is handed to
`transport.write`, behind which everything later queues, so the byte stream keeps the
order frames were written in whichever path wrote them.

While a consumer serves the frames of one read (`hold` to `release`), what `write` takes is
held and written with one `send()` at the end: a pipelined reconnect's AUTH_OK, SYNC_BATCH and
ROOM_BATCH in one instead of three (docs/performance.md,
"Lean handshake, upgrade, frame and per-socket paths"). Every other write to the socket
releases what is held first (`write_now`, and autobahn's own `sendData`,
qim/server/handshake_write.py), so the byte stream keeps the order the frames were written in.

With the `direct_writes` replacement stock (QIM_SERVER_TUNING=off, or a library it was not
verified on: qim/server/catalog.py) every frame takes autobahn's path. So does anything
unusual (not a plain TCP transport: TLS, a Unix socket, uvicorn, an in-process communicator;
compression negotiated; autobahn not OPEN or in the middle of a queued or fragmented write;
Twisted closing the socket) answers `None` or False here, and the caller takes the normal
path through autobahn.
"""

from __future__ import annotations

from typing import Any

from autobahn.websocket.protocol import WebSocketProtocol
from twisted.internet import tcp

from qim.node.outbound import DIRECT, HELD, QUEUED, SERVER_LIMITS, TextFrame
from qim.server.tuning import STATE as TUNING

# The most a socket holds (`DaphneSocket.hold`): a reconnect's replies are a few KiB; big pages
# pipelined (SYNCs cut at QIM_MAX_OUTBOUND_FRAME_BYTES) go out as they come past this.
HELD_BYTES_MAX = 64 * 1024
STATE_OPEN = WebSocketProtocol.STATE_OPEN
SEND_STATE_GROUND = WebSocketProtocol.SEND_STATE_GROUND


def twisted_buffered(transport: Any) -> int:
    """What a Twisted FileDescriptor transport holds unsent (AttributeError for other kinds)."""
    return len(transport.dataBuffer) - transport.offset + transport._tempDataLen


class DaphneSocket:
    """The autobahn protocol and Twisted TCP transport under one daphne WebSocket."""

    __slots__ = ("protocol", "transport", "max_payload", "plain", "held")

    def __init__(self, protocol: WebSocketProtocol, transport: tcp.Server) -> None:
        self.protocol = protocol
        self.transport = transport
        self.max_payload: int = protocol.maxMessagePayloadSize
        # Open with no compression, server masking or auto-fragmenting: found once, as none
        # of them changes after the opening handshake.
        self.plain = False
        # Frames' bytes `write` keeps while a read's frames are served (`hold`), else None.
        self.held: list[bytes] | None = None

    @classmethod
    def under(cls, send: Any) -> "DaphneSocket | None":
        """The socket under an ASGI `send` when it is daphne's over plain TCP, else None.

        Daphne hands every application `partial(server.handle_reply, protocol)` as `send`.
        Its message limit is noted either way: autobahn refuses to send a larger frame on
        the stock path too (outbound_frame_cap).
        """
        protocol = (getattr(send, "args", None) or (None,))[0]
        if not isinstance(protocol, WebSocketProtocol):
            return None
        SERVER_LIMITS.max_payload = protocol.maxMessagePayloadSize
        if "direct_writes" not in TUNING.enabled:
            return None
        transport = protocol.transport
        if not plain_tcp(transport):
            return None
        return cls(protocol, transport)

    def buffered(self) -> int:
        """Bytes written that Twisted still holds because the kernel did not take them (not
        what `hold` keeps: that is the node's own wait, bounded by HELD_BYTES_MAX, not the
        peer's unread bytes that the slow-socket bound is about)."""
        return twisted_buffered(self.transport)

    def writable(self, frame: TextFrame) -> bool:
        """Whether `write` may take this frame; otherwise autobahn must (and decides)."""
        protocol = self.protocol
        return (
            protocol.state == STATE_OPEN
            and takes_writes(self.transport)
            and protocol.send_state == SEND_STATE_GROUND
            and not protocol.send_queue
            and (self.plain or self._plain())
            and not (0 < self.max_payload < frame.size)
        )

    def _plain(self) -> bool:
        protocol = self.protocol
        self.plain = (
            protocol.state == STATE_OPEN
            and protocol._perMessageCompress is None
            and not protocol.maskServerFrames
            and not protocol.autoFragmentSize
        )
        return self.plain

    def write(self, frame: TextFrame) -> int:
        """Write a frame `writable` accepted: DIRECT when the kernel took all of it at once,
        QUEUED when (part of) it waits in Twisted's buffer, HELD while `hold` is on."""
        held = self.held
        if held is not None:
            if sum(map(len, held)) + len(frame.data) <= HELD_BYTES_MAX:
                held.append(frame.data)
                return HELD
            self._write_held()  # then this frame, and holding goes on
        return self._send(frame.data, twisted_buffered(self.transport))

    def hold(self) -> None:
        """Keep what `write` takes until `release` (a consumer serving the frames of one read)."""
        self.held = []
        HOLDING[self.protocol] = self

    def release(self) -> None:
        """Write what is held; `write` writes at once from now on."""
        HOLDING.pop(self.protocol, None)
        self._write_held()
        self.held = None

    def _write_held(self) -> None:
        """What is held, with one `send()`, the rest behind what Twisted holds. A socket Twisted
        is closing, or that autobahn left OPEN without a write (a lost connection), drops it,
        as it drops a frame written to it now."""
        held = self.held
        if not held:
            return
        self.held = []
        transport = self.transport
        if self.protocol.state != STATE_OPEN or not takes_writes(transport):
            return
        send_or_queue(transport, held[0] if len(held) == 1 else b"".join(held), twisted_buffered(transport))

    def write_now(self, frame: TextFrame, max_buffered: int) -> int:
        """`writable` and `write` in one call for a room's tick: DIRECT or QUEUED, or 0 when
        the frame is not writable here or the socket holds more than `max_buffered` unread
        bytes (the caller's normal path decides: autobahn, or the 4429 close). The checks
        of `writable` and the send of `_send` are written out here: this runs once per member
        of every tick, and each call layer was a few percent of a 5 000-member tick. What a
        held socket holds is written first, so the tick is not delayed and comes after it."""
        if self.held is not None:
            self.release()
        transport, protocol = self.transport, self.protocol
        # Twisted empties dataBuffer (b"") and _tempDataLen (0) once it has sent everything
        # (FileDescriptor.doWrite): two reads for the usual socket, the sum only when it holds some.
        if transport.dataBuffer or transport._tempDataLen:
            buffered = len(transport.dataBuffer) - transport.offset + transport._tempDataLen
            if buffered > max_buffered:
                return 0
        else:
            buffered = 0
        if (
            protocol.state != STATE_OPEN
            or protocol.send_state != SEND_STATE_GROUND
            or protocol.send_queue
            or not (self.plain or self._plain())
            or 0 < self.max_payload < frame.size
            or not transport.connected
            or transport.disconnecting
            or transport._writeDisconnected
        ):
            return 0
        data = frame.data
        if buffered:
            transport.write(data)
            return QUEUED
        try:
            sent = transport.socket.send(data)
        except OSError:
            sent = 0  # EAGAIN, or a reset: Twisted's own doWrite meets the error and closes
        if sent == len(data):
            return DIRECT
        transport.write(data[sent:])
        return QUEUED

    def _send(self, data: bytes, buffered: int) -> int:
        return send_or_queue(self.transport, data, buffered)


# The sockets holding writes now, by autobahn protocol: few at a time, and empty between reads.
HOLDING: dict[Any, DaphneSocket] = {}


def release_held(protocol: Any) -> None:
    """Before autobahn writes to this socket (a close, a Pong, a frame on its path): what the
    socket holds goes first, as it was written first. A write on autobahn's path after a
    close's is never made, so a held frame never follows a close frame."""
    socket = HOLDING.get(protocol)
    if socket is not None:
        socket.release()


def plain_tcp(transport: Any) -> bool:
    """Exactly Twisted's TCP server transport, not encrypting: a TLS transport
    (TLSMemoryBIOProtocol, or startTLS) must encrypt what it is given, and a subclass may
    buffer differently, so only this one is written to or read from past Twisted's own paths."""
    return type(transport) is tcp.Server and not getattr(transport, "TLS", False)


def takes_writes(transport: tcp.Server) -> bool:
    """Twisted has neither closed nor begun to close the socket: bytes written now reach the
    peer. (DaphneSocket.write_now writes the same checks out, per member of a tick.)"""
    return transport.connected and not transport.disconnecting and not transport._writeDisconnected


def send_or_queue(transport: tcp.Server, data: bytes, buffered: int) -> int:
    """One `send()` when Twisted holds nothing for the socket (`buffered` == 0), the rest (or
    all of it) queued behind what Twisted holds: DIRECT or QUEUED."""
    if not buffered:
        try:
            sent = transport.socket.send(data)
        except OSError:
            # EAGAIN, or a reset: Twisted's own doWrite meets the error and closes.
            sent = 0
        if sent == len(data):
            return DIRECT
        data = data[sent:]
    transport.write(data)
    return QUEUED


def write_control(protocol: Any, data: bytes) -> bool:
    """Write a whole pre-framed control frame (qim/server/heartbeat.py's Pong) to a daphne
    socket over plain TCP: one `send()` when Twisted holds nothing, else behind what it holds.
    False when autobahn must write it instead: not that kind of transport, not OPEN, or
    autobahn in the middle of a queued or fragmented write (its queue may hold part of a
    frame). Control frames are never compressed or fragmented, so compression does not matter."""
    transport = getattr(protocol, "transport", None)
    if (
        "direct_writes" not in TUNING.enabled
        or not plain_tcp(transport)
        or protocol.state != STATE_OPEN
        or not takes_writes(transport)
        or protocol.send_state != SEND_STATE_GROUND
        or protocol.send_queue
        or protocol.maskServerFrames
    ):
        return False
    send_or_queue(transport, data, twisted_buffered(transport))
    return True
