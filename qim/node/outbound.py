"""Pushes encoded and framed once, whichever path writes them to each socket.

A server-to-client frame is unmasked (RFC 6455 §5.1), so one encoded frame fits every socket
of a room's batch. What writes it is either autobahn (stock) or, with QIM_SERVER_TUNING on, the
direct write of qim/server/wire.py; both take these frames."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from qim.conf import limit

OPCODE_TEXT_FIN = 0x81
# How `DaphneSocket.write_now` wrote a frame (0: it did not; the caller takes the normal path);
# HELD: `write` kept it until `release`.
DIRECT, QUEUED, HELD = 1, 2, 3


class ServerLimits:
    """What the serving process told us of its own limits: daphne's message limit (one server
    gives every socket the same), 0 until a socket showed it."""

    __slots__ = ("max_payload",)

    def __init__(self) -> None:
        self.max_payload = 0


SERVER_LIMITS = ServerLimits()


def text_frame(text: str) -> bytes:
    """One unmasked, unfragmented RFC 6455 text frame (§5.2) carrying `text`."""
    return frame_bytes(text.encode())


def frame_bytes(payload: bytes) -> bytes:
    """The text frame around `payload`, the UTF-8 bytes of the text."""
    size = len(payload)
    if size <= 125:
        header = struct.pack("!BB", OPCODE_TEXT_FIN, size)
    elif size <= 0xFFFF:
        header = struct.pack("!BBH", OPCODE_TEXT_FIN, 126, size)
    else:
        header = struct.pack("!BBQ", OPCODE_TEXT_FIN, 127, size)
    return header + payload


@dataclass(frozen=True, slots=True)
class TextFrame:
    """A push encoded and framed once, written to many sockets (a room's batch)."""

    text: str
    data: bytes
    # UTF-8 bytes of `text`: what autobahn's maxMessagePayloadSize is compared with.
    size: int

    @classmethod
    def of(cls, text: str) -> "TextFrame":
        return cls.of_bytes(text.encode())

    @classmethod
    def of_bytes(cls, payload: bytes) -> "TextFrame":
        """From the UTF-8 bytes of the text (what the JSON encoder gives)."""
        return cls(payload.decode(), frame_bytes(payload), len(payload))


def outbound_frame_cap() -> int:
    """The largest frame to send, in UTF-8 bytes of its text: QIM_MAX_OUTBOUND_FRAME_BYTES,
    and never above daphne's own limit once a socket showed it (a larger frame is lost)."""
    cap = int(limit("max_outbound_frame_bytes"))
    daphne = SERVER_LIMITS.max_payload
    return min(cap, daphne) if daphne > 0 else cap
