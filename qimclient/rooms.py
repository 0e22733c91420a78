"""RoomSync: the rooms this client is in, each a stream of room events handed on once and in
room_seq order, across replays, reconnects and writer restarts (protocol.md §8, design §1.3)."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .codec import Frame
from .errors import ConnectionLost, QimError
from .pushes import PushQueue

if TYPE_CHECKING:
    from .backoff import Backoff
    from .pipeline import SentRequest

logger = logging.getLogger("qimclient")

EPOCH_SHIFT = 48
RoomItem = dict[str, Any]
RoomCallback = Callable[[RoomItem], Awaitable[None] | None]
PrepareEvents = Callable[[list[dict[str, Any]]], Awaitable[None]]

# Why the client skipped ahead (RoomItem kind "truncated"): the server's reasons
# (epoch_changed, evicted, ahead) and two of the client's own.
GAP = "gap"          # pushes skipped room_seqs and a ROOM_REPLAY could not fill them
UNKNOWN = "unknown"  # replay_truncated without a reason
# A live gap may be a frame the server deferred (per-connection budget): wait this long
# before asking for a replay.
GAP_GRACE_S = 1.5
GAP_FILL_ATTEMPTS = 2
REJOIN_ATTEMPTS = 3


def room_epoch_of(room_seq: int) -> int:
    return room_seq >> EPOCH_SHIFT


class RoomSession(Protocol):
    """What RoomSync needs from the connection (QimClient satisfies it)."""

    async def request(self, frame_type: str, /, **fields: Any) -> Frame: ...


@dataclass(eq=False)
class RoomState:
    """One room the client is in: where its stream stands and what is held back."""

    room_id: str
    # Epoch of the newest batch seen; `last_room_seq` is the last room_seq handed on (or
    # jumped to): nothing at or below it is handed on again, and rejoins replay after it.
    room_epoch: int | None = None
    last_room_seq: int | None = None
    latest_room_seq: int | None = None
    truncations: int = 0
    joined: asyncio.Event = field(default_factory=asyncio.Event)
    # Pushed events past a gap, waiting for the gap to fill: room_seq -> event.
    held: dict[int, dict[str, Any]] = field(default_factory=dict)
    gap_task: asyncio.Task[None] | None = None
    # Asking for the rest of a reply that said `has_more`.
    more_task: asyncio.Future[None] | None = None


class RoomSync:
    """Turns ROOM_BATCH replies and pushes into one ordered, deduplicated stream of items
    (a reply cut by size, `has_more`, is followed by ROOM_REPLAYs for the rest):

    * `{"kind": "event", "room_id", "room_seq", "event"}`: a room event, once, in room_seq
      order per room (the event gets a `render` field, as message objects do);
    * `{"kind": "truncated", "room_id", "reason", "room_epoch", "last_room_seq",
      "latest_room_seq"}`: the client skipped from `last_room_seq` to `latest_room_seq`,
      because a batch said `replay_truncated` (reason from the server), the epoch changed
      (a writer restart: `epoch_changed`) or a gap could not be filled (`gap`);
    * `{"kind": "left", "room_id", "reason", "message"}`: a rejoin after a reconnect was
      refused (`reason` is the ERROR code, or `timeout`); the room is no longer tracked.

    `accept` runs in the reader, so batches are taken in arrival order: a join's replay is
    placed before the live pushes that follow it. Items leave through one task (the pump),
    which renders events and awaits async callbacks in turn.
    """

    def __init__(
        self,
        session: RoomSession,
        *,
        prepare: PrepareEvents | None = None,
        max_queued_items: int = 10_000,
        gap_grace: float = GAP_GRACE_S,
        backoff: Backoff | None = None,
    ) -> None:
        self.session = session
        self.prepare = prepare
        self.gap_grace = gap_grace
        self.backoff = backoff
        self.rooms: dict[str, RoomState] = {}
        # Counters, for tests and operators.
        self.stale_batches = 0
        self.gap_fills = 0
        self._queue = PushQueue(max_queued_items, key="room_id", noun="room item") if max_queued_items > 0 else None
        self._callbacks: list[RoomCallback] = []
        self._inbox: deque[RoomItem] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # Tracking (driven by the room requests)

    def track(self, room_id: str) -> RoomState:
        state = self.rooms.get(room_id)
        if state is None:
            state = self.rooms[room_id] = RoomState(room_id)
        return state

    def forget(self, room_id: str) -> None:
        state = self.rooms.pop(room_id, None)
        if state is not None:
            self._stop_tasks(state)
            state.held.clear()

    def connection_lost(self) -> None:
        """The socket dropped: no room is joined until its rejoin is answered (the rejoin's
        replay also fills any gap and asks for the rest of a cut reply, so those stop)."""
        for state in self.rooms.values():
            state.joined.clear()
            self._stop_tasks(state)

    async def wait_joined(self, room_id: str, timeout: float | None) -> None:
        state = self.rooms.get(room_id)
        if state is not None and not state.joined.is_set():
            async with asyncio.timeout(timeout):
                await state.joined.wait()

    def join_fields(self, state: RoomState) -> dict[str, Any]:
        fields: dict[str, Any] = {"room_id": state.room_id}
        if state.last_room_seq is not None:
            fields["after_room_seq"] = state.last_room_seq
        return fields

    async def rejoin_all(self, sent: Mapping[str, SentRequest] | None = None) -> None:
        """After a reconnect: ROOM_JOIN every tracked room with `after_room_seq` = the last
        room_seq handed on, so the answer replays what was missed (or says it cannot). All
        rooms at once, each with its own retries; `sent` holds joins already written behind
        AUTH (the reconnect's catch-up), whose replies stand for each room's first attempt."""
        sent = dict(sent or {})
        rejoins = [self._rejoin(room_id, state, sent.pop(room_id, None)) for room_id, state in list(self.rooms.items())]
        for request in sent.values():  # rooms left since
            request.discard()
        await asyncio.gather(*rejoins)

    async def _rejoin(self, room_id: str, state: RoomState, sent: SentRequest | None) -> None:
        for attempt in range(REJOIN_ATTEMPTS):
            if self.rooms.get(room_id) is not state:
                if sent is not None:
                    sent.discard()
                return  # left meanwhile
            try:
                if sent is not None:
                    request, sent = sent, None
                    await request.reply()
                else:
                    await self.session.request("ROOM_JOIN", **self.join_fields(state))
                return
            except ConnectionLost:
                return  # the next reconnect rejoins
            except QimError as error:
                if error.code == "rate_limited" and attempt + 1 < REJOIN_ATTEMPTS:
                    await asyncio.sleep((error.retry_after_ms or 0) / 1000)
                    continue
                self._give_up(room_id, error.code, error.message)
                return
            except TimeoutError:
                if attempt + 1 == REJOIN_ATTEMPTS:
                    self._give_up(room_id, "timeout", "no answer to ROOM_JOIN")
                elif self.backoff is not None:
                    await asyncio.sleep(self.backoff.delay(attempt))

    def _give_up(self, room_id: str, reason: str, message: str) -> None:
        logger.warning("could not rejoin room %s: %s %s", room_id, reason, message)
        self.forget(room_id)
        self._emit({"kind": "left", "room_id": room_id, "reason": reason, "message": message})

    # Incoming batches (from the reader; never blocks, never raises)

    def accept(self, frame: Frame) -> None:
        """A ROOM_BATCH, reply or push; ignored unless its room is tracked."""
        state = self.rooms.get(frame.get("room_id"))  # type: ignore[arg-type]
        if state is None:
            return
        try:
            self._accept(state, frame)
        except Exception:  # a bug here must not stop the reader
            logger.exception("could not take a ROOM_BATCH of room %s", state.room_id)

    def _accept(self, state: RoomState, frame: Frame) -> None:
        epoch = _seq(frame.get("room_epoch"))
        if epoch is not None and state.room_epoch is not None and epoch < state.room_epoch:
            # From a writer that was replaced (a late frame): all of it lies behind us.
            self.stale_batches += 1
            return
        events = sorted(
            (e for e in frame.get("events") or [] if isinstance(e, dict) and _seq(e.get("room_seq")) is not None),
            key=lambda e: e["room_seq"],
        )
        latest = _seq(frame.get("latest_room_seq"))
        epoch_changed = epoch is not None and state.room_epoch is not None and epoch > state.room_epoch
        if epoch is not None:
            state.room_epoch = epoch
        if latest is not None:
            state.latest_room_seq = latest
        state.joined.set()
        truncated = frame.get("replay_truncated") is True
        if truncated or epoch_changed:
            reason = frame.get("replay_truncated_reason") if truncated else "epoch_changed"
            target = events[0]["room_seq"] - 1 if events else latest
            self._jump(state, str(reason or UNKNOWN), target)
        elif state.last_room_seq is None:
            # The first batch of a fresh join: the stream starts here.
            state.last_room_seq = events[0]["room_seq"] - 1 if events else latest
        for event in events:
            if state.last_room_seq is None or event["room_seq"] > state.last_room_seq:
                state.held[event["room_seq"]] = event
        if "req_id" in frame and latest is not None:
            if frame.get("has_more") is True and events:
                # A reply cut by size (§8): whole up to its last event; the rest is asked for.
                self._release(state, events[-1]["room_seq"])
                self._ask_for_more(state)
            else:
                # A reply (join, replay) is the whole range after the position asked for, up
                # to the head: it leaves no gap below `latest`.
                self._release(state, latest)
        self._drain(state)

    def _jump(self, state: RoomState, reason: str, target: int | None) -> None:
        """Report the skip, then move on; events already held below the target still go out."""
        state.truncations += 1
        self._emit({
            "kind": "truncated", "room_id": state.room_id, "reason": reason, "room_epoch": state.room_epoch,
            "last_room_seq": state.last_room_seq, "latest_room_seq": target,
        })
        if target is not None:
            self._release(state, target)

    def _release(self, state: RoomState, up_to: int) -> None:
        """Hand on every held event up to `up_to`, in order, and move the position there."""
        for room_seq in sorted(s for s in state.held if s <= up_to):
            self._hand_on(state, state.held.pop(room_seq))
        if state.last_room_seq is None or up_to > state.last_room_seq:
            state.last_room_seq = up_to

    def _drain(self, state: RoomState) -> None:
        while state.last_room_seq is not None and state.last_room_seq + 1 in state.held:
            self._hand_on(state, state.held.pop(state.last_room_seq + 1))
        if state.held and (state.gap_task is None or state.gap_task.done()):
            state.gap_task = asyncio.ensure_future(self._fill_gap(state))
        elif not state.held:
            self._cancel_gap_fill(state)

    def _hand_on(self, state: RoomState, event: dict[str, Any]) -> None:
        state.last_room_seq = event["room_seq"]
        self._emit({"kind": "event", "room_id": state.room_id, "room_seq": event["room_seq"], "event": event})

    async def _fill_gap(self, state: RoomState) -> None:
        """Pushes skipped a room_seq: give a deferred frame time to arrive, then ROOM_REPLAY
        from the position (its answer goes through `accept`); report what stays missing."""
        for _ in range(GAP_FILL_ATTEMPTS):
            await asyncio.sleep(self.gap_grace)
            if not state.held or self.rooms.get(state.room_id) is not state:
                return
            self.gap_fills += 1
            try:
                await self.session.request("ROOM_REPLAY", room_id=state.room_id, after_room_seq=state.last_room_seq)
            except ConnectionLost:
                return  # the rejoin replays
            except (QimError, TimeoutError) as error:
                logger.info("ROOM_REPLAY of room %s failed: %s", state.room_id, error)
            if not state.held:
                return
        state.gap_task = None  # the jump below must not cancel this very task
        self._jump(state, GAP, min(state.held) - 1)
        self._drain(state)

    def _ask_for_more(self, state: RoomState) -> None:
        # A new task each time: the one whose answer is being taken has not finished yet.
        state.more_task = asyncio.ensure_future(self._replay_more(state))

    async def _replay_more(self, state: RoomState) -> None:
        """A reply said `has_more`: ROOM_REPLAY after the last event handed on. Its answer
        goes through `accept`, which asks again while it says `has_more`."""
        for attempt in range(GAP_FILL_ATTEMPTS):
            if self.rooms.get(state.room_id) is not state:
                return
            try:
                await self.session.request("ROOM_REPLAY", room_id=state.room_id, after_room_seq=state.last_room_seq)
                return
            except ConnectionLost:
                return  # the rejoin replays from the same position
            except (QimError, TimeoutError) as error:
                logger.info("ROOM_REPLAY of room %s failed: %s", state.room_id, error)
                await asyncio.sleep(self.gap_grace)
        self._jump(state, GAP, state.latest_room_seq)
        self._drain(state)

    def _cancel_gap_fill(self, state: RoomState) -> None:
        task, state.gap_task = state.gap_task, None
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()

    def _stop_tasks(self, state: RoomState) -> None:
        self._cancel_gap_fill(state)
        more, state.more_task = state.more_task, None
        if more is not None and not more.done() and more is not asyncio.current_task():
            more.cancel()

    # Delivery

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="qimclient-rooms")

    async def stop(self) -> None:
        for state in self.rooms.values():
            state.joined.clear()
            self._stop_tasks(state)
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    def on_item(self, callback: RoomCallback) -> Callable[[], None]:
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback) if callback in self._callbacks else None

    async def next_item(self, timeout: float | None = 10.0, room_id: str | None = None) -> RoomItem:
        return await self._require_queue().get(timeout, room_id)

    def drain_items(self) -> list[RoomItem]:
        return self._require_queue().drain()

    @property
    def dropped(self) -> int:
        """Items the queue dropped, oldest first, because nobody read it (callbacks saw them)."""
        return self._queue.dropped if self._queue is not None else 0

    @property
    def pending(self) -> int:
        """Items accepted but not yet through the pump."""
        return len(self._inbox)

    def _emit(self, item: RoomItem) -> None:
        self._inbox.append(item)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            if not self._inbox:
                self._wake.clear()
                await self._wake.wait()
                continue
            item = self._inbox.popleft()
            if item["kind"] == "event" and self.prepare is not None:
                try:
                    await self.prepare([item["event"]])
                except Exception:
                    logger.exception("could not render room event %s", item.get("room_seq"))
            if self._queue is not None:
                self._queue.put(item)
            for callback in list(self._callbacks):
                try:
                    result = callback(item)
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    logger.exception("room callback %r failed on %s", callback, item.get("room_seq", item["kind"]))

    def _require_queue(self) -> PushQueue:
        if self._queue is None:
            raise RuntimeError("room items are not queued (max_queued_room_events=0); use on_room_event")
        return self._queue


def _seq(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
