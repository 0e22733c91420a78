"""The mailbox stream's calls as QimClient offers them (on_event, next_event, wait_synced)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .sync import EventCallback, MailboxEvent, MailboxSync


class MailboxAccess:
    """The mailbox stream's calls, mixed into QimClient (which provides `mailbox`)."""

    if TYPE_CHECKING:
        mailbox: MailboxSync | None

    def on_event(self, callback: EventCallback) -> Callable[[], None]:
        """Call `callback(event)` for each mailbox event, once, in `mailbox_seq` order; returns its remover.

        Live events (protocol §6.5: `event["live"] is True`, no `mailbox_seq`) come the same
        way, in their turn among the pushes; they never move the cursor.

        Register before `connect()` to see the catch-up too. Async callbacks are awaited in
        turn (the stream waits for them), so they must not wait for the stream themselves
        (`wait_synced`, `next_event`); a failing callback is logged and the stream goes on.
        """
        return self._require_mailbox().on_event(callback)

    async def next_event(self, timeout: float | None = 10.0) -> MailboxEvent:
        """The next mailbox event (the `event` object of EVENT / SYNC_BATCH), in order, never
        twice; a live event (`live: true`, no `mailbox_seq`) in its turn.

        Raises TimeoutError when none arrives within `timeout` seconds; None waits forever.
        """
        return await self._require_mailbox().next_event(timeout)

    def drain_events(self) -> list[MailboxEvent]:
        """All queued mailbox events, oldest first, without waiting."""
        return self._require_mailbox().drain_events()

    async def wait_synced(self, timeout: float | None = 10.0) -> None:
        """Wait until every event the server announced so far was handed on (catch-up done)."""
        await self._require_mailbox().wait_synced(timeout)

    def _require_mailbox(self) -> MailboxSync:
        if self.mailbox is None:
            raise RuntimeError("mailbox events need QimClient(..., sync=True)")
        return self.mailbox
