"""MailboxSync: a device's ordered, deduplicated mailbox event stream (SYNC catch-up, then EVENT pushes)."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from .backoff import Backoff
from .codec import Frame
from .cursor import CursorStore, MemoryCursorStore
from .errors import ConnectionLost, QimError

if TYPE_CHECKING:
    from .pipeline import SentRequest

logger = logging.getLogger("qimclient")

MailboxEvent = dict[str, Any]
EventCallback = Callable[[MailboxEvent], Awaitable[None] | None]
PrepareEvents = Callable[[list[MailboxEvent]], Awaitable[None]]

# EVENT pushes held while a catch-up runs or the reader is stalled; past this they are
# dropped and one SYNC fetches them again, so memory stays bounded and nothing in the mailbox
# is lost (live events, which no SYNC returns, are: they were best effort anyway).
MAX_HELD_PUSHED_EVENTS = 10_000


class SyncSession(Protocol):
    """What MailboxSync needs from the connection (QimClient satisfies it; unit tests fake it)."""

    @property
    def is_closed(self) -> bool: ...

    async def request(self, frame_type: str, /, **fields: Any) -> Frame: ...

    async def wait_connected(self, timeout: float | None = None) -> None: ...


class MailboxSync:
    """Hands each mailbox event on exactly once, in `mailbox_seq` order, and moves the cursor.

    One task (the pump) does all the work, so catch-ups never overlap and ordering holds:
    a requested catch-up (connect, reconnect, a possible gap) pages SYNC from the cursor
    until `has_more` is false; pushed EVENTs wait their turn and are dropped when the cursor
    already covers them. `mailbox_seq` gaps are normal (§5: entries that originated on this
    device are skipped), so a gap only triggers a SYNC, which decides.

    Live events (protocol §6.5: `live: true`, no `mailbox_seq`; a `mention_only` member's
    view of a group) are in no mailbox: they are handed on in their turn among the pushes,
    through the same callbacks and queue, and never move the cursor nor count as a gap.

    The pump never interprets `kind` or `custom_type`: unknown ones are handed on like any
    other. Only an event with neither an integer `mailbox_seq` nor `live: true` is dropped
    (and counted).
    """

    def __init__(
        self,
        session: SyncSession,
        store: CursorStore | None = None,
        *,
        page_size: int | None = None,
        max_queued_events: int = 10_000,
        backoff: Backoff | None = None,
        prepare: PrepareEvents | None = None,
    ) -> None:
        self.session = session
        # Awaited with each page (or live event) before it is handed on; QimClient renders
        # messages with it. A failure is logged and the events go on regardless (C-6).
        self.prepare = prepare
        self.store = store if store is not None else MemoryCursorStore()
        self.page_size = page_size
        self.backoff = backoff if backoff is not None else Backoff()
        self.cursor: int = self.store.load() or 0
        # Counters, for tests and operators.
        self.catch_ups = 0
        self.gap_fills = 0
        self.invalid_events = 0
        # Live events handed on (§6.5): they say nothing about the cursor.
        self.live_events = 0
        # SYNC pages that said `history_truncated` (§6.2): the server's retention deleted
        # entries after our cursor; the page itself is normal, this only tells the app.
        self.history_truncations = 0
        self._queue: asyncio.Queue[MailboxEvent] | None = (
            asyncio.Queue(max_queued_events) if max_queued_events > 0 else None
        )
        self._callbacks: list[EventCallback] = []
        self._pushed: deque[MailboxEvent] = deque()
        # A catch-up is owed while requested > satisfied; a drop during a catch-up bumps
        # `requested`, so that catch-up cannot count for the reconnect that follows.
        self._sync_requested = 0
        self._sync_satisfied = 0
        # A SYNC the reconnect wrote behind AUTH, and `_sync_requested` when it was written:
        # the next catch-up takes its reply as its first page unless more was asked since.
        self._presented: tuple[SentRequest, int] | None = None
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._stopped = asyncio.Event()
        self._stopped.set()
        self._task: asyncio.Task[None] | None = None

    # Lifecycle (driven by QimClient)

    def start(self) -> None:
        """Start the pump if it is not running; a fresh session always owes a catch-up."""
        self.request_sync()
        if self._task is None or self._task.done():
            self._stopped.clear()
            self._task = asyncio.create_task(self._run(), name="qimclient-mailbox-sync")

    async def stop(self) -> None:
        """Stop the pump (at close); the cursor is already saved after each hand-on."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        self._stopped.set()

    def request_sync(self) -> None:
        """Owe one catch-up from the cursor: on connect, on a drop, on a possible gap."""
        self._sync_requested += 1
        self._idle.clear()
        self._wake.set()

    def catch_up_fields(self) -> dict[str, Any] | None:
        """The first SYNC of the catch-up owed (a reconnect writes it behind AUTH), or None."""
        if self._sync_requested <= self._sync_satisfied:
            return None
        return self._sync_fields()

    def _sync_fields(self) -> dict[str, Any]:
        """A SYNC page from the cursor."""
        fields: dict[str, Any] = {"after_mailbox_seq": self.cursor}
        if self.page_size is not None:
            fields["limit"] = self.page_size
        return fields

    def present(self, request: SentRequest) -> None:
        """The SYNC from `catch_up_fields`, already written; the pump takes its reply."""
        self._discard_presented()
        self._presented = (request, self._sync_requested)
        self._wake.set()

    def _discard_presented(self) -> None:
        presented, self._presented = self._presented, None
        if presented is not None:
            presented[0].discard()

    def offer(self, event: Any) -> None:
        """A pushed EVENT's event object, from the reader; never blocks, never raises."""
        if _seq_of(event) is None and not is_live_event(event):
            self._note_invalid(event)
            return
        if len(self._pushed) >= MAX_HELD_PUSHED_EVENTS:
            logger.warning("more than %d pushed events held; dropping them for one SYNC", MAX_HELD_PUSHED_EVENTS)
            self._pushed.clear()
            self.request_sync()
            return
        self._pushed.append(event)
        self._idle.clear()
        self._wake.set()

    # Consumers

    def on_event(self, callback: EventCallback) -> Callable[[], None]:
        """Register `callback(event)`; returns its remover. Async callbacks are awaited in order."""
        self._callbacks.append(callback)

        def remove() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return remove

    async def next_event(self, timeout: float | None = 10.0) -> MailboxEvent:
        """The next event in `mailbox_seq` order (live events in their turn); TimeoutError
        after `timeout` s (None: forever)."""
        queue = self._require_queue()
        try:
            async with asyncio.timeout(timeout):
                return await queue.get()
        except TimeoutError:
            raise TimeoutError(f"no mailbox event within {timeout} s") from None

    def drain_events(self) -> list[MailboxEvent]:
        """Every queued event, oldest first, without waiting."""
        queue = self._require_queue()
        events = []
        while not queue.empty():
            events.append(queue.get_nowait())
        return events

    async def wait_synced(self, timeout: float | None = 10.0) -> None:
        """Wait until no catch-up is owed and no live event is held: everything the server has
        announced so far was handed on. ConnectionLost if the pump stops first (client closed)."""
        async with asyncio.timeout(timeout):
            while not self._idle.is_set():
                if self._stopped.is_set():
                    raise ConnectionLost("the client closed before the mailbox was synced")
                waiters = [asyncio.ensure_future(e.wait()) for e in (self._idle, self._stopped)]
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiter in waiters:
                        waiter.cancel()

    # The pump

    async def _run(self) -> None:
        failures = 0
        try:
            while True:
                if not self._owes_work():
                    # No await between the check and setting idle: an offer() cannot slip between.
                    self._idle.set()
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                try:
                    await self._step()
                    failures = 0
                    continue
                except ConnectionLost:
                    if self.session.is_closed:
                        return
                    # The next step waits for the reconnect, then syncs from the cursor. The
                    # first pause is a bare yield, so the reader can notice the drop.
                    self.request_sync()
                    pause = 0.0 if failures == 0 else self.backoff.delay(failures)
                except (QimError, TimeoutError) as error:
                    retry_after = (error.retry_after_ms or 0) / 1000 if isinstance(error, QimError) else 0.0
                    pause = max(self.backoff.delay(failures), retry_after)
                    logger.warning("SYNC failed (%s); retrying in %.2f s", error, pause)
                except Exception:  # a bug here must not end the stream
                    pause = self.backoff.delay(failures)
                    logger.exception("mailbox sync failed; retrying in %.2f s", pause)
                failures += 1
                await asyncio.sleep(pause)
        finally:
            self._stopped.set()

    def _owes_work(self) -> bool:
        return self._sync_requested > self._sync_satisfied or bool(self._pushed)

    async def _step(self) -> None:
        if self._sync_requested > self._sync_satisfied:
            await self._catch_up()
            return
        event = self._pushed[0]
        seq = _seq_of(event)
        if seq is None:  # a live event (offer() admits no other without a seq)
            self._pushed.popleft()
            await self._prepare([event])
            await self._hand_on(event)
            return
        if seq > self.cursor + 1:
            # Maybe lost, maybe skipped as our own device's: SYNC from the cursor decides.
            self.gap_fills += 1
            self.request_sync()
            await self._catch_up()
        self._pushed.popleft()
        # After a gap fill this is normally covered; if SYNC did not see it, hand it on anyway.
        if seq > self.cursor:
            await self._prepare([event])
            await self._hand_on(event)
            self._save()

    async def _catch_up(self) -> None:
        """Page SYNC from the cursor until `has_more` is false; the cursor is saved per page."""
        owed = self._sync_requested
        await self.session.wait_connected(timeout=None)
        while True:
            batch = await self._next_page()
            before = self.cursor
            if batch.get("history_truncated"):
                self.history_truncations += 1
                logger.info("SYNC after %d: older mailbox entries were deleted by the server's retention", before)
            fresh = [e for e in self._ordered(batch.get("events")) if e["mailbox_seq"] > self.cursor]
            await self._prepare(fresh)
            for event in fresh:
                if event["mailbox_seq"] > self.cursor:  # a page repeating a seq: once
                    await self._hand_on(event)
            next_seq = batch.get("next_mailbox_seq")
            if _is_seq(next_seq) and next_seq > self.cursor:
                # Past entries skipped for this device, too (§5).
                self.cursor = next_seq
            self._save()
            if not batch.get("has_more"):
                break
            if self.cursor == before:
                logger.warning("SYNC said has_more without moving past %d; stopping this catch-up", before)
                break
        self._sync_satisfied = max(self._sync_satisfied, owed)
        self.catch_ups += 1

    async def _next_page(self) -> Frame:
        """SYNC from the cursor; the reconnect's SYNC when it was asked for this very catch-up
        (a page from behind the cursor is still right: `_catch_up` hands on only what is past it)."""
        presented, self._presented = self._presented, None
        if presented is not None:
            request, owed = presented
            if owed == self._sync_requested:
                return await request.reply()
            request.discard()
        return await self.session.request("SYNC", **self._sync_fields())

    def _ordered(self, events: Any) -> list[MailboxEvent]:
        valid = []
        for event in events if isinstance(events, list) else []:
            if _seq_of(event) is None:
                self._note_invalid(event)
            else:
                valid.append(event)
        return sorted(valid, key=lambda event: event["mailbox_seq"])

    async def _prepare(self, events: list[MailboxEvent]) -> None:
        if self.prepare is None or not events:
            return
        try:
            await self.prepare(events)
        except Exception:
            logger.exception("preparing %d mailbox events failed; handing them on as they are", len(events))

    async def _hand_on(self, event: MailboxEvent) -> None:
        if self._queue is not None:
            await self._queue.put(event)  # a full queue holds the pump: backpressure, not loss
        seq = _seq_of(event)
        if seq is None:
            self.live_events += 1
        else:
            self.cursor = seq
        for callback in list(self._callbacks):
            try:
                result = callback(event)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception("event callback %r failed on %s", callback, _describe(event))

    def _save(self) -> None:
        try:
            self.store.save(self.cursor)
        except Exception:
            # The stream goes on; a restart would re-deliver from the last saved cursor.
            logger.exception("could not save the mailbox cursor %d", self.cursor)

    def _require_queue(self) -> asyncio.Queue[MailboxEvent]:
        if self._queue is None:
            raise RuntimeError("events are not queued (max_queued_events=0); use on_event")
        return self._queue

    def _note_invalid(self, event: Any) -> None:
        self.invalid_events += 1
        logger.warning("ignoring a mailbox event with neither an integer mailbox_seq nor live: true: %.200r", event)


def _is_seq(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_live_event(event: Any) -> bool:
    """A live event (§6.5): `live: true` and no `mailbox_seq`; in no mailbox, so SYNC never
    returns it and it says nothing about gaps."""
    return isinstance(event, dict) and event.get("live") is True and "mailbox_seq" not in event


def _describe(event: MailboxEvent) -> str:
    seq = _seq_of(event)
    return f"mailbox_seq {seq}" if seq is not None else f"a live event of {event.get('conversation_id')}"


def _seq_of(event: Any) -> int | None:
    if isinstance(event, dict) and _is_seq(event.get("mailbox_seq")):
        return event["mailbox_seq"]  # type: ignore[no-any-return]
    return None
