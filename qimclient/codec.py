"""Frame (de)serialization: compact JSON text, one object per WebSocket message."""

from __future__ import annotations

import json
from typing import Any

Frame = dict[str, Any]


def encode_frame(frame: Frame) -> str:
    """Serialize compactly; non-ASCII stays UTF-8 so frames stay small against the 64 KiB cap."""
    return json.dumps(frame, separators=(",", ":"), ensure_ascii=False)


def decode_frame(message: str | bytes) -> Frame | None:
    """Parse one message; None for anything that is not a JSON object, so readers never crash.

    Python's json keeps integers exact, so 64-bit `room_seq` values survive (§4).
    """
    try:
        value = json.loads(message)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None
