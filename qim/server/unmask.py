"""Inbound frames unmasked with two big-integer XORs instead of a CFFI masker per frame.

Every client frame is masked (RFC 6455 §5.3); autobahn makes a masker per frame, and its
native one (`autobahn.nvx`) imports its module, allocates a C mask, a C masker with a GC hook
and a C copy of the payload each time: about 3 % of a node's samples in a reconnect storm,
whose frames are a few hundred bytes (docs/performance.md,
"Lean handshake, upgrade, frame and per-socket paths"). Below LARGE_FRAME bytes `IntXorMasker`
does the same XOR in C through Python's integers; larger frames keep autobahn's SIMD masker."""

from __future__ import annotations

from typing import Any

# At and above this payload size autobahn's own masker is used: measured here, the integers
# win below about 1 KiB (2-6 us against 10-20 us a frame) and lose above.
LARGE_FRAME = 1024


class IntXorMasker:
    """autobahn's masker interface (`pointer`, `reset`, `process`) for one frame's mask; a
    frame's payload may come in several pieces, each continuing the mask where the last ended."""

    __slots__ = ("_mask", "_ptr")

    def __init__(self, mask: bytes) -> None:
        self._mask = bytes(mask)
        self._ptr = 0

    def pointer(self) -> int:
        return self._ptr

    def reset(self) -> None:
        self._ptr = 0

    def process(self, data: bytes) -> bytes:
        size = len(data)
        if size == 0:
            return b""
        shift = self._ptr & 3
        key = self._mask[shift:] + self._mask[:shift] if shift else self._mask
        self._ptr += size
        return xor_masked(key, data)


def xor_masked(key: bytes, data: bytes) -> bytes:
    """RFC 6455 §5.3: `data` XOR the 4-byte `key` repeated, as one big-integer XOR."""
    size = len(data)
    if not size:
        return b""
    stream = (key * ((size >> 2) + 1))[:size]
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(size, "big")


def install() -> None:
    """Once, at start-up, before the first socket (qim/asgi.py)."""
    import autobahn.websocket.protocol as protocol

    if getattr(protocol.create_xor_masker, "qim_unmask", False):
        return
    native = protocol.create_xor_masker

    def create_xor_masker(mask: bytes, length: int | None = None) -> Any:
        if length is not None and length < LARGE_FRAME:
            return IntXorMasker(mask)
        return native(mask, length)

    create_xor_masker.qim_unmask = True  # type: ignore[attr-defined]
    protocol.create_xor_masker = create_xor_masker  # type: ignore[attr-defined]
