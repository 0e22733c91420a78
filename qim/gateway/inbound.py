"""Inbound text to a validated frame: every way a frame can be bad ends in Refused, so the
consumer answers a typed ERROR and never closes with 1011 (protocol.md §4, issue #17)."""

from __future__ import annotations

import functools
import re
from typing import Any, TypeVar

import msgspec
from django.conf import settings

from qim.errors import Refused
from qim.gateway import codec

T = TypeVar("T")

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# A JSON string (skipped whole, so brackets inside it do not count) or one bracket.
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def check_depth(text: str) -> None:
    """Refuse text nested deeper than QIM_MAX_INBOUND_FRAME_DEPTH before decoding it: msgspec
    and json recurse once per level, and a thousand levels overflow the stack of whichever
    step (decode, encode, a log line) meets them first."""
    allowed = settings.QIM_MAX_INBOUND_FRAME_DEPTH
    # Cheap C-level count first: text with few brackets cannot be deep.
    if text.count("[") + text.count("{") <= allowed:
        return
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > allowed:
                raise Refused("bad_frame", f"frames are nested at most {allowed} levels deep")
        elif token in "]}":
            depth -= 1


def parse_frame(text: str) -> dict[str, Any]:
    """The frame's JSON object; Refused(bad_frame) for anything else."""
    check_depth(text)
    try:
        raw = codec.decode(text)
    except msgspec.DecodeError as exc:
        # ValidationError is a DecodeError too: a number out of the float range.
        raise Refused("bad_frame", f"malformed JSON: {exc}") from None
    except RecursionError:
        raise Refused("bad_frame", "frame nested too deeply") from None
    if not isinstance(raw, dict):
        raise Refused("bad_frame", "a frame is a JSON object")
    return raw


def convert_frame(raw: dict[str, Any], schema: type[T], frame_type: str) -> T:
    """`raw` validated against `schema`; integers and strings in its fields must also fit the
    database (64-bit integers, no NUL), whatever the schema says."""
    try:
        frame = codec.convert(raw, schema)
    except msgspec.ValidationError as exc:
        raise Refused("bad_frame", f"{frame_type}: {exc}") from None
    problem = _unstorable(frame, "$")
    if problem is not None:
        raise Refused("bad_frame", f"{frame_type}: {problem}")
    return frame


def _unstorable(value: Any, path: str) -> str | None:
    """What in a converted frame's typed fields no database column would take: an integer
    outside 64 bits (SQLite raises OverflowError) or a NUL in a string (PostgreSQL refuses
    it). Opaque payloads (fields typed Any) are stored as JSON text and not looked into."""
    if isinstance(value, msgspec.Struct):
        for name in _typed_fields(type(value)):
            problem = _unstorable(getattr(value, name), f"{path}.{name}")
            if problem is not None:
                return problem
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            problem = _unstorable(item, f"{path}[{index}]")
            if problem is not None:
                return problem
    elif isinstance(value, int) and not isinstance(value, bool):
        if not INT64_MIN <= value <= INT64_MAX:
            return f"integer out of the 64-bit range - at `{path}`"
    elif isinstance(value, str) and "\x00" in value:
        return f"NUL character in string - at `{path}`"
    return None


@functools.cache
def _typed_fields(schema: type[msgspec.Struct]) -> tuple[str, ...]:
    return tuple(field.name for field in msgspec.structs.fields(schema) if field.type is not Any)
