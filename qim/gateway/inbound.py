"""Inbound text to a validated frame: every way a frame can be bad ends in Refused, so the
consumer answers a typed ERROR and never closes with 1011 (protocol.md §4, issue #17)."""

from __future__ import annotations

import functools
import re
from typing import Any, TypeVar

import msgspec
import msgspec.inspect
from django.conf import settings

from qim.errors import Refused
from qim.infra import codec

T = TypeVar("T")

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# A JSON string (skipped whole, so brackets inside it do not count) or one bracket.
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
# The escape of U+0000: an odd number of backslashes, then u0000 (`\\u0000` is text).
_NUL_ESCAPE = re.compile(r'(?<!\\)(?:\\\\)*\\u0000')


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


def holds_nul(text: str) -> bool:
    """Whether a string in the frame holds U+0000 (JSON can only carry it escaped)."""
    return "\\u0000" in text and _NUL_ESCAPE.search(text) is not None


def convert_frame(raw: dict[str, Any], schema: type[T], frame_type: str, text: str) -> T:
    """`raw` (decoded from `text`) validated against `schema`; it must also fit the database
    whatever the schema says: no NUL in any string, payloads included (PostgreSQL stores none:
    ids are text columns, previews and control events JSON ones), and 64-bit integers in the
    typed fields."""
    try:
        frame = codec.convert(raw, schema)
    except msgspec.ValidationError as exc:
        raise Refused("bad_frame", f"{frame_type}: {exc}") from None
    if holds_nul(text):
        raise Refused("bad_frame", f"{frame_type}: strings may not hold NUL (\\u0000)")
    problem = _unstorable(frame, "$")
    if problem is not None:
        raise Refused("bad_frame", f"{frame_type}: {problem}")
    return frame


def _unstorable(value: Any, path: str) -> str | None:
    """What in a converted frame's typed fields no database column would take: an integer
    outside 64 bits (SQLite raises OverflowError, PostgreSQL's bigint refuses it). Opaque
    payloads (fields typed Any) are stored as JSON text and not looked into."""
    where = _out_of_range(value)
    return None if where is None else f"integer out of the 64-bit range - at `{path}{where}`"


# Field values that hold no integer: an id, a missing optional field, a flag.
_LEAVES = frozenset({str, type(None), bool, float})


def _out_of_range(value: Any) -> str | None:
    """The path below `value` of its first integer outside 64 bits ("" for `value` itself), or
    None. The path is built only for that integer, on the way back up: every frame is checked,
    and naming each field it passed was most of the check's cost
    (docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths")."""
    if isinstance(value, msgspec.Struct):
        for name in _typed_fields(type(value)):
            field = getattr(value, name)
            if type(field) in _LEAVES:  # most fields: nothing to look into
                continue
            where = _out_of_range(field)
            if where is not None:
                return f".{name}{where}"
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            where = _out_of_range(item)
            if where is not None:
                return f"[{index}]{where}"
    elif isinstance(value, int) and not isinstance(value, bool):
        if not INT64_MIN <= value <= INT64_MAX:
            return ""
    return None


@functools.cache
def _typed_fields(schema: type[msgspec.Struct]) -> tuple[str, ...]:
    """The fields `_unstorable` must look at: typed (not Any), and of a type whose values can
    be or hold an integer (most of a frame's fields are strings, booleans or dicts)."""
    typed = {field.name for field in msgspec.structs.fields(schema) if field.type is not Any}
    return tuple(field.name for field in msgspec.inspect.type_info(schema).fields
                 if field.name in typed and _may_hold_an_int(field.type))


def _may_hold_an_int(kind: msgspec.inspect.Type) -> bool:
    """Whether a value of this type can be, or be a list or tuple holding, a non-bool int;
    True where unsure."""
    if isinstance(kind, (msgspec.inspect.StrType, msgspec.inspect.BoolType, msgspec.inspect.NoneType,
                         msgspec.inspect.FloatType, msgspec.inspect.DictType, msgspec.inspect.BytesType,
                         msgspec.inspect.LiteralType, msgspec.inspect.SetType, msgspec.inspect.FrozenSetType)):
        return False
    if isinstance(kind, (msgspec.inspect.ListType, msgspec.inspect.VarTupleType)):
        return _may_hold_an_int(kind.item_type)
    if isinstance(kind, msgspec.inspect.TupleType):
        return any(_may_hold_an_int(item) for item in kind.item_types)
    if isinstance(kind, msgspec.inspect.UnionType):
        return any(_may_hold_an_int(member) for member in kind.types)
    return True
