"""JSON in and out of frames, through msgspec: fast, and it validates frame schemas too."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def encode(frame: Any) -> str:
    """Compact JSON text of a frame; pushes are encoded once and the text reused per socket."""
    return _encoder.encode(frame).decode()


def encode_bytes(frame: Any) -> bytes:
    """The same JSON as `encode`, as UTF-8 bytes: measured against a frame-size cap."""
    return _encoder.encode(frame)


def decode(text: str | bytes) -> Any:
    """Raises msgspec.DecodeError on malformed JSON."""
    return _decoder.decode(text)


def convert(data: Any, schema: type[T]) -> T:
    """Validate a decoded frame against its schema; raises msgspec.ValidationError."""
    return msgspec.convert(data, schema)
