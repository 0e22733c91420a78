"""Hypothesis strategies for hostile client frames, built from the gateway's dispatch table so
a new frame type is fuzzed as soon as it is registered (qim/gateway/dispatch.py)."""

from __future__ import annotations

import json
import types
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import msgspec
from hypothesis import strategies as st

from qim.gateway.dispatch import load_frame_modules, registered_types, route_for


@dataclass(frozen=True)
class Raw:
    """A JSON fragment written as is: what json.dumps cannot make (NaN, 1 000 levels, lone
    surrogates, integers past 64 bits written by hand)."""

    text: str


def deep(levels: int, opener: str = "[", closer: str = "]", core: str = "") -> Raw:
    return Raw(opener * levels + core + closer * levels)


# The named hostile inputs of issue #17, each as a JSON value.
HOSTILE_FRAGMENTS = [
    Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1e999"), Raw("-1e999"),
    Raw('"\\ud800"'), Raw('"x\\udc00y"'), Raw('"\\ud800\\ud800"'), Raw('"\\u0000"'),
    Raw("18446744073709551616"), Raw("-18446744073709551617"), Raw("9223372036854775808"),
    Raw("1" * 400),
    deep(1000), deep(1000, '{"a":', "}", "1"), deep(33), deep(31),
]

HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 2**63, -(2**63) - 1, 2**64, -(2**64), 1.5, -0.0, "", " ",
    "x" * 65, "é" * 20_000, "\u202e\u200b\ufeff", "😀" * 40, "a b", [], {}, [None], {"": None},
]


def json_values() -> st.SearchStrategy[Any]:
    """Any JSON value of a few levels, with unicode text and unbounded integers."""
    scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=40) | st.floats(
        allow_nan=False, allow_infinity=False
    )
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=12,
    )


def hostile_values() -> st.SearchStrategy[Any]:
    return st.sampled_from(HOSTILE_VALUES) | st.sampled_from(HOSTILE_FRAGMENTS) | json_values()


def _for_type(annotation: Any, known: dict[str, list[Any]], name: str) -> st.SearchStrategy[Any]:
    """A value of `annotation` (a msgspec field type) that usually passes its schema."""
    if known.get(name):
        return st.sampled_from(known[name])
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Union or origin is types.UnionType:
        return st.one_of([_for_type(arg, known, name) for arg in args])
    if origin is Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(_for_type(args[0], known, name), max_size=5)
    meta = next((a for a in getattr(annotation, "__metadata__", ()) if isinstance(a, msgspec.Meta)), None)
    base = getattr(annotation, "__origin__", annotation) if meta else annotation
    if base is type(None):
        return st.none()
    if base is str:
        if meta and meta.pattern:
            return st.from_regex(meta.pattern, fullmatch=True)
        return st.text(min_size=(meta and meta.min_length) or 0, max_size=(meta and meta.max_length) or 40)
    if base is int:
        return st.integers(min_value=(meta and meta.ge) or 0, max_value=min((meta and meta.le) or 2**40, 2**40))
    if isinstance(base, type) and issubclass(base, msgspec.Struct):
        return struct_values(base, known)
    return json_values()


def struct_values(schema: type[msgspec.Struct], known: dict[str, list[Any]]) -> st.SearchStrategy[dict]:
    """Objects shaped like `schema`, each field left out, plausible, or hostile."""
    fields = {}
    for field in msgspec.structs.fields(schema):
        if field.name == "type":
            continue
        plausible = _for_type(field.type, known, field.name)
        fields[field.name] = st.one_of(st.just(_MISSING), plausible, plausible, hostile_values())
    extra = st.dictionaries(st.text(max_size=10), hostile_values(), max_size=2)
    return st.builds(_without_missing, st.fixed_dictionaries(fields), extra)


_MISSING = object()


def _without_missing(fields: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    present = {k: v for k, v in fields.items() if v is not _MISSING}
    return {**extra, **present}


def frame_types() -> list[str]:
    load_frame_modules()
    return registered_types()


def frames_of(frame_type: str, known: dict[str, list[Any]]) -> st.SearchStrategy[dict]:
    """Frames of `frame_type` whose fields are fuzzed; `type` itself is kept."""
    route = route_for(frame_type)
    assert route is not None, frame_type
    return struct_values(route.schema, known).map(lambda body: {**body, "type": frame_type})


def to_json(value: Any) -> str:
    """JSON text of `value`, Raw fragments spliced in (json.dumps escapes non-ASCII, so the
    text is valid UTF-8 whatever the strings hold)."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(to_json(item) for item in value) + "]"
    return json.dumps(value)


# Whole frames that are not a frame object at all.
NOT_OBJECTS: list[str | bytes] = [
    "", " ", "not json", "{", '{"type": "PING"', "[]", '["PING"]', '"PING"', "42", "null", "true",
    "NaN", "Infinity", "-Infinity", "1e999", '{"type": NaN}', '{"type": "PING", "x": Infinity}',
    "[" * 1000 + "]" * 1000, '{"a":' * 1000 + "1" + "}" * 1000,
    '{"type": "PING", "req_id": "r", "x": ' + "[" * 1000 + "]" * 1000 + "}",
    '{"type": "PING", "req_id": "\\ud800"}', '{"type": "\\udc00"}', '{"type": "PING", "req_id": "\\u0000"}',
    '{"type": "PING", "req_id": 18446744073709551616}', '{"type": ' + "9" * 5000 + "}",
    '{"type": "PING"} trailing', '{"type": "PING", "type": "SYNC"}', "\ufeff{}",
    b"", b"\x00\xff\xfe", b'{"type": "PING"}', b"x" * 70_000, "x" * 70_000,
]


def any_text_frames() -> st.SearchStrategy[str | bytes]:
    """Random text and bytes, as a broken or hostile client might send."""
    return st.sampled_from(NOT_OBJECTS) | st.text(max_size=200) | st.binary(max_size=200) | json_values().map(to_json)
