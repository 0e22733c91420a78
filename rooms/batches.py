"""ROOM_BATCH frames cut by encoded size, so that none exceeds the outbound frame cap.

Daphne's --websocket-max-message-size (autobahn's maxMessagePayloadSize) bounds what the
server sends as well as what it receives: a larger frame raises PayloadExceededError and is
lost for that socket. Pushes are cut into several frames, each holding the next events in
room_seq order; a replay reply carries the oldest events that fit and says `has_more`
(protocol.md §8). A single event is never cut: the cap must stay above one event. Fitting
a list to a budget is shared with SYNC and HISTORY replies (qim/node/fit.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import msgspec

from qim.infra import codec
from qim.node.fit import split_list
from qim.node.outbound import TextFrame

logger = logging.getLogger(__name__)


def batch_frame(meta: dict[str, Any], events: list[dict[str, Any]] | msgspec.Raw) -> dict[str, Any]:
    """A pushed ROOM_BATCH (no req_id) of `events` under the room head in `meta`."""
    return {
        "type": "ROOM_BATCH",
        "room_id": meta["room_id"],
        "room_epoch": meta["room_epoch"],
        "events": events,
        "latest_room_seq": meta["latest_room_seq"],
        "earliest_replay_room_seq": meta["earliest_replay_room_seq"],
        "replay_truncated": False,
    }


@dataclass(frozen=True, slots=True)
class Batch:
    """One frame to push and the events it carries (kept to defer what the budget refuses)."""

    events: list[dict[str, Any]]
    frame: TextFrame


def encode_batches(meta: dict[str, Any], events: list[dict[str, Any]], cap: int, max_events: int = 0) -> list[Batch]:
    """`events` as ROOM_BATCH frames of at most `cap` bytes and (when > 0) `max_events`
    events each, in order.

    The usual case is one encode and one frame, written to every member as it is; only a
    frame over the cap is cut, by the encoded size of each event.
    """
    if 0 < max_events < len(events):
        return [batch for first in range(0, len(events), max_events)
                for batch in encode_batches(meta, events[first:first + max_events], cap)]
    data = codec.encode_bytes(batch_frame(meta, events))
    if len(data) <= cap or len(events) <= 1:
        if len(data) > cap:
            logger.warning("one room event of %d bytes is over the frame cap %d", len(data), cap)
        return [Batch(events, TextFrame.of_bytes(data))]
    budget = cap - len(codec.encode_bytes(batch_frame(meta, [])))
    # Each event encoded once more, and each frame spliced from those bytes.
    return [
        Batch(piece.items, TextFrame.of_bytes(codec.encode_bytes(batch_frame(meta, piece.json))))
        for piece in split_list(events, budget)
    ]
