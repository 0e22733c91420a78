"""Stored JSON text (message payloads, mailbox controls) decoded as `json.loads` decodes it, faster.

A reconnect storm's SYNC decodes every missed event's payload in a DB thread; msgspec does it in
a fraction of the stdlib's time (docs/performance.md,
"Lean handshake, upgrade, frame and per-socket paths"). Where msgspec accepts a text its value is
the stdlib's (big integers, duplicate keys, floats included); what it refuses and the stdlib takes
(NaN, Infinity, a number past a double's range, a lone surrogate) or refuses too goes to
`json.loads`, so every text gets the stdlib's answer."""

from __future__ import annotations

import json
from typing import Any

import msgspec

_decoder = msgspec.json.Decoder()


def loads(text: str | bytes) -> Any:
    """`json.loads(text)`: the same value, or the same exception."""
    try:
        return _decoder.decode(text)
    except Exception:  # DecodeError, ValidationError, UnicodeEncodeError, RecursionError
        return json.loads(text)
