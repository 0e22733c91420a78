"""The room requests of protocol.md §8 (join, leave, send, replay) and the room stream's
accessors, mixed into QimClient; the stream itself is RoomSync (rooms.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .codec import Frame
from .errors import ConnectionLost, QimError
from .rooms import RoomCallback, RoomItem, RoomState, RoomSync

if TYPE_CHECKING:
    from .backoff import Backoff

logger = logging.getLogger("qimclient")


class RoomRequests:
    """The §8 requests and the room stream, mixed into QimClient (which provides `rooms`,
    `request`, `wait_connected`, `is_connected`, `reconnect`, `request_timeout`, `backoff`,
    `client_msg_ids`)."""

    if TYPE_CHECKING:
        rooms: RoomSync
        reconnect: bool
        request_timeout: float
        backoff: Backoff
        client_msg_ids: Callable[[], str]

        @property
        def is_connected(self) -> bool: ...

        async def request(self, frame_type: str, /, **fields: Any) -> Frame: ...

        async def wait_connected(self, timeout: float | None = None) -> None: ...

    async def join_room(self, room_id: str, after_room_seq: int | None = None) -> Frame:
        """ROOM_JOIN; answers the ROOM_BATCH reply, whose events also enter the room stream.
        A replay too large for one frame says `has_more`: the stream asks for the rest
        (ROOM_REPLAY after its last event) by itself.

        From then on the room is tracked: its events reach `on_room_event`/`next_room_event`
        once each, in room_seq order, and every reconnect rejoins it with `after_room_seq` =
        the last room_seq handed on. Joining a tracked room again replays after that position;
        `after_room_seq` asks for a replay from elsewhere (what was handed on is not repeated).
        QimError (`room_limit`, `not_found`) leaves a new room untracked; after ConnectionLost
        it stays tracked, and the next session joins it.
        """
        known = room_id in self.rooms.rooms
        state = self.rooms.track(room_id)
        if after_room_seq is not None and state.last_room_seq is None:
            state.last_room_seq = after_room_seq
        fields = self.rooms.join_fields(state)
        if after_room_seq is not None:
            fields["after_room_seq"] = after_room_seq
        try:
            return await self.request("ROOM_JOIN", **fields)
        except QimError:
            if not known:
                self.rooms.forget(room_id)
            raise

    async def leave_room(self, room_id: str) -> None:
        """ROOM_LEAVE, and stop tracking: no rejoin; a later `join_room` starts afresh. While
        disconnected there is nothing to tell the server (it dropped the membership)."""
        self.rooms.forget(room_id)
        try:
            await self.request("ROOM_LEAVE", room_id=room_id)
        except ConnectionLost:
            pass

    async def room_send(
        self,
        room_id: str,
        content_type: str,
        payload: Any,
        client_msg_id: str | None = None,
        *,
        retries: int = 3,
    ) -> Frame:
        """ROOM_SEND; answers the ACK `{message_id, room_seq}`. The event itself comes back
        through the room stream like anyone's.

        Like `send_message`: after ConnectionLost or TimeoutError (outcome unknown) it waits
        for the next session and for the room's rejoin, then sends again with the SAME
        `client_msg_id`; the writer answers a repeat with the original ACK while the original
        is in its ring (a writer restart forgets it). `conflict` (the writer is moving) is
        retried after a pause; other refusals (`rate_limited`, `forbidden`...) raise at once.
        """
        client_msg_id = client_msg_id or self.client_msg_ids()
        patience = self.request_timeout + self.backoff.maximum
        attempt = 0
        while True:
            try:
                if self.is_connected:
                    await self.rooms.wait_joined(room_id, timeout=patience)  # a rejoin may be under way
                return await self.request(
                    "ROOM_SEND", room_id=room_id, client_msg_id=client_msg_id, content_type=content_type, payload=payload
                )
            except (ConnectionLost, TimeoutError) as error:
                if not self.reconnect or attempt >= retries:
                    raise
                attempt += 1
                logger.info("ROOM_SEND %s unanswered (%s); retry %d with the same id", client_msg_id, error, attempt)
                await self.wait_connected(timeout=patience)
            except QimError as error:
                if error.code != "conflict" or attempt >= retries:
                    raise
                attempt += 1
                await asyncio.sleep(self.backoff.delay(attempt))

    async def room_replay(self, room_id: str, after_room_seq: int) -> Frame:
        """ROOM_REPLAY; answers the ROOM_BATCH, the oldest events that fit in one frame
        (`has_more` when there are more: ask again after its last event). For a tracked room
        its events not yet handed on enter the stream, which fetches the rest by itself, and
        a truncation is reported there too."""
        return await self.request("ROOM_REPLAY", room_id=room_id, after_room_seq=after_room_seq)

    def on_room_event(self, callback: RoomCallback) -> Callable[[], None]:
        """Call `callback(item)` for every room item (kinds `event`, `truncated`, `left`), in
        order; returns its remover. Async callbacks are awaited in turn."""
        return self.rooms.on_item(callback)

    async def next_room_event(self, timeout: float | None = 10.0, room_id: str | None = None) -> RoomItem:
        """The next room item (of `room_id`, if given; others stay queued in order).

        Raises TimeoutError when none arrives within `timeout` seconds; None waits forever.
        """
        return await self.rooms.next_item(timeout, room_id)

    def drain_room_events(self) -> list[RoomItem]:
        """Every queued room item, oldest first, without waiting."""
        return self.rooms.drain_items()

    def room_state(self, room_id: str) -> RoomState | None:
        """Where a tracked room's stream stands (`room_epoch`, `last_room_seq`...); None if untracked."""
        return self.rooms.rooms.get(room_id)
