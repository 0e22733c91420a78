"""qim.infra.stored_json.loads answers every text as json.loads does: the same value (and type), or
the same exception, including the texts msgspec refuses and the stdlib takes."""

from __future__ import annotations

import json
import math
import random

import pytest

from qim.infra.stored_json import loads

EDGES = [
    '{"text": "hi", "n": 3}', '{"a": 1, "a": 2}', "123456789012345678901234567890",
    "-123456789012345678901234567890", "18446744073709551616", "-9223372036854775809", "1.5e-400",
    "NaN", "Infinity", "-Infinity", "[NaN, 1]", "1e400", "-1e400", "1.7976931348623159e308",
    '"\\ud800"', '"\\udc00\\ud800"', '{"\\ud800": 1}', '"\\ud83d\\ude00"', '{"t": "a\\u0000b"}',
    "-0", "-0.0", "0.1", "1E5", "5e-324", '"\\/"', ' {"a" : [1, {"b": null}] } ', "true", "null",
    "1" * 5000, "[" * 100_000 + "]" * 100_000,
    # Refused by both: the exception is the stdlib's.
    '"a\x01b"', '"a\tb"', "[1,]", '{"a": 1}x', "", "01", "1.", ".5", "+1", "\ufeff{}", "'a'",
]
EDGES_BYTES = [b'{"a": "\xc3\xa9"}', b'\xef\xbb\xbf{"a": 1}', '{"a": 1}'.encode("utf-16"), b'{"a": "\xff"}']


def answer(decode, text):  # type: ignore[no-untyped-def]
    try:
        return "value", decode(text)
    except Exception as exc:
        return "error", type(exc), str(exc)


def same(left, right) -> bool:  # type: ignore[no-untyped-def]
    """Equal values of equal types all the way down; NaN equal to NaN."""
    if type(left) is not type(right):
        return False
    if isinstance(left, float):
        return (math.isnan(left) and math.isnan(right)) or repr(left) == repr(right)
    if isinstance(left, dict):
        return list(left) == list(right) and all(same(left[k], right[k]) for k in left)
    if isinstance(left, (list, tuple)):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right))
    return left == right


@pytest.mark.parametrize("text", EDGES + EDGES_BYTES, ids=lambda t: repr(t[:24]))
def test_edge_texts_answer_as_the_stdlib(text) -> None:  # type: ignore[no-untyped-def]
    assert same(answer(loads, text), answer(json.loads, text))


def test_random_texts_answer_as_the_stdlib() -> None:
    alphabet = '{}[]":,0123456789.eE+- \\tfnrulaNIy\u00e9\t'
    rng = random.Random(22)
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10)))
        assert same(answer(loads, text), answer(json.loads, text)), text
