"""A reply's list of JSON items cut to a byte budget, so that the frame stays under the cap.

Daphne's --websocket-max-message-size (autobahn's maxMessagePayloadSize) bounds what the
server sends as well as what it receives: a larger frame raises PayloadExceededError and is
lost for that socket (`qim.node.outbound.outbound_frame_cap`). Replies whose list can grow
past it (ROOM_BATCH, SYNC_BATCH, HISTORY_BATCH, CONVERSATION_LIST) carry the items that fit and say `has_more`.
A single item is never cut: every reply holds at least one, so that paging makes progress.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable
from typing import Generic, TypeVar

import msgspec

from qim.infra import codec
from qim.node.outbound import outbound_frame_cap

T = TypeVar("T")

# What a reply's fields other than its list may take: ROOM_BATCH's room_id of 64 characters,
# four 19-digit numbers, the truncation reason and has_more; SYNC_BATCH's cursor and
# has_more; HISTORY_BATCH's conversation_id and has_more; CONVERSATION_LIST's badge, has_more
# and next_before (a 64-character id); each under 400 bytes with the list's brackets. The client's req_id comes on top (reply_items_budget).
REPLY_FIELDS_RESERVE = 1024


def reply_items_budget(req_id: str | None) -> int:
    """Bytes a reply's list (its items and commas) may take, so that the reply stays under the
    cap with its other fields and the client's echoed req_id."""
    echoed = len(codec.encode_bytes(req_id)) if req_id is not None else 0
    return outbound_frame_cap() - REPLY_FIELDS_RESERVE - echoed


@dataclass(frozen=True, slots=True)
class FittedList(Generic[T]):
    """The items kept, in their order, and their JSON list, ready to splice into a reply."""

    items: list[T]
    json: msgspec.Raw


def fit_list(items: list[T], budget: int, *, keep_last: bool = False) -> FittedList[T]:
    """The first `items` (the last ones with `keep_last`) whose JSON items and commas fit in
    `budget` bytes; at least one.

    The list is encoded once, and that is all when it fits (the usual case: the reply splices
    these bytes in, so no item is encoded twice); only a list over the budget is measured item
    by item.
    """
    data = codec.encode_bytes(items)
    if len(data) - 2 <= budget or len(items) <= 1:
        return FittedList(items, msgspec.Raw(data))
    parts: list[bytes] = []
    used = -1  # n items take n - 1 commas
    for item in reversed(items) if keep_last else items:
        part = codec.encode_bytes(item)
        used += len(part) + 1
        if used > budget and parts:
            break
        parts.append(part)
    if keep_last:
        parts.reverse()
        kept = items[len(items) - len(parts):]
    else:
        kept = items[: len(parts)]
    return FittedList(kept, msgspec.Raw(b"[" + b",".join(parts) + b"]"))


def fit_chunks(chunks: Iterable[list[T]], budget: int) -> tuple[FittedList[T], bool]:
    """fit_list over items made a chunk at a time (CONVERSATION_LIST builds each item with
    queries): the next chunk is asked for only while the budget holds, so items past the page
    are never made. Answers the fitted list and whether the budget left items out.

    A chunk that fits is encoded once, as fit_list does; only the chunk that goes over is
    measured item by item.
    """
    kept: list[T] = []
    parts: list[bytes] = []
    used = -1  # n items take n - 1 commas
    for chunk in chunks:
        if not chunk:
            continue
        data = codec.encode_bytes(chunk)
        if used + len(data) - 1 <= budget or not kept and len(chunk) == 1:
            kept += chunk
            parts.append(data[1:-1])
            used += len(data) - 1
            continue
        for item in chunk:
            part = codec.encode_bytes(item)
            if used + len(part) + 1 > budget and kept:
                return FittedList(kept, msgspec.Raw(b"[" + b",".join(parts) + b"]")), True
            kept.append(item)
            parts.append(part)
            used += len(part) + 1
    return FittedList(kept, msgspec.Raw(b"[" + b",".join(parts) + b"]")), False


def split_list(items: list[T], budget: int) -> list[FittedList[T]]:
    """`items` as consecutive lists whose JSON items and commas each fit in `budget` bytes (at
    least one item each), every item encoded once: for pushes that go out as several frames."""
    pieces: list[FittedList[T]] = []
    kept: list[T] = []
    parts: list[bytes] = []
    used = -1  # n items take n - 1 commas
    for item in items:
        part = codec.encode_bytes(item)
        if kept and used + len(part) + 1 > budget:
            pieces.append(FittedList(kept, msgspec.Raw(b"[" + b",".join(parts) + b"]")))
            kept, parts, used = [], [], -1
        kept.append(item)
        parts.append(part)
        used += len(part) + 1
    if kept:
        pieces.append(FittedList(kept, msgspec.Raw(b"[" + b",".join(parts) + b"]")))
    return pieces

