"""convert_frame's 64-bit check (qim/gateway/inbound.py) in process: the first integer outside
64 bits in a typed field is named by its path, through nested structs, lists and tuples; bools,
strings, floats and the opaque payload (typed Any) are not integers to refuse."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from qim.errors import Refused
from qim.gateway.inbound import INT64_MAX, INT64_MIN, convert_frame

BIG, SMALL = INT64_MAX + 1, INT64_MIN - 1


class Part(msgspec.Struct):
    seq: int
    seqs: list[int] = []


class Frame(msgspec.Struct):
    type: str
    req_id: str | None = None
    after: int | None = None
    flag: bool = False
    ratio: float = 0.0
    part: Part | None = None
    parts: list[Part] = []
    pair: tuple[int, int] | None = None
    payload: Any = None


def refusal(raw: dict[str, Any]) -> str | None:
    try:
        convert_frame(raw, Frame, "TEST", msgspec.json.encode(raw).decode())
    except Refused as refused:
        assert refused.code == "bad_frame"
        return refused.message
    return None


@pytest.mark.parametrize(("raw", "where"), [
    ({"after": BIG}, "$.after"),
    ({"after": SMALL}, "$.after"),
    ({"part": {"seq": BIG}}, "$.part.seq"),
    ({"part": {"seq": 1, "seqs": [1, 2, SMALL]}}, "$.part.seqs[2]"),
    ({"parts": [{"seq": 1}, {"seq": 2, "seqs": [BIG]}]}, "$.parts[1].seqs[0]"),
    ({"pair": [1, BIG]}, "$.pair[1]"),
    ({"after": BIG, "part": {"seq": BIG}}, "$.after"),
])
def test_the_first_integer_out_of_range_is_named(raw: dict[str, Any], where: str) -> None:
    assert refusal({"type": "TEST", **raw}) == f"TEST: integer out of the 64-bit range - at `{where}`"


def test_in_range_values_and_the_payload_pass() -> None:
    assert refusal({"type": "TEST", "req_id": "r1", "after": INT64_MAX, "flag": True, "ratio": 1e300,
                    "part": {"seq": INT64_MIN, "seqs": [0, -1]}, "parts": [{"seq": 3}], "pair": [1, 2],
                    "payload": {"n": BIG}}) is None
