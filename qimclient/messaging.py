"""Typed helpers for the §5 requests (SEND, HISTORY, CONVERSATIONS, TYPING, PRESENCE_SUB), mixed into QimClient."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .codec import Frame
from .errors import ConnectionLost

if TYPE_CHECKING:
    from .backoff import Backoff

logger = logging.getLogger("qimclient")

TYPING_STATES = ("start", "stop")
# §10: HISTORY's `limit` defaults to 50 and is held to 200.
HISTORY_DEFAULT_LIMIT = 50
HISTORY_MAX_LIMIT = 200


def new_client_msg_id() -> str:
    """A fresh idempotency key for SEND (§5: unique per user)."""
    return uuid.uuid4().hex


class ConversationRequests:
    """Needs `request`, `send_frame`, `wait_connected`, `reconnect`, `request_timeout` from its host."""

    if TYPE_CHECKING:
        reconnect: bool
        request_timeout: float
        backoff: Backoff
        client_msg_ids: Callable[[], str]

        async def request(self, frame_type: str, /, **fields: Any) -> Frame: ...

        async def send_frame(self, frame: Frame) -> None: ...

        async def wait_connected(self, timeout: float | None = None) -> None: ...

        async def _render_messages(self, messages: list[dict[str, Any]]) -> None: ...

    async def send_text(
        self, conversation_id: str, text: str, client_msg_id: str | None = None, *, retries: int = 3
    ) -> Frame:
        """SEND `{"text": text}`; returns the ACK `{message_id, conversation_seq, sent_at_ms}`.

        Retries like `send_message`. Raises QimError when refused.
        """
        return await self.send_message(conversation_id, "text", {"text": text}, client_msg_id, retries=retries)

    async def send_message(
        self,
        conversation_id: str,
        content_type: str,
        payload: Any,
        client_msg_id: str | None = None,
        *,
        retries: int = 3,
    ) -> Frame:
        """SEND one message; returns its ACK.

        When the socket drops before the ACK (ConnectionLost), or no ACK comes in time
        (TimeoutError), the outcome is unknown: with `reconnect` on this waits for the next
        session and sends again, up to `retries` times, with the SAME `client_msg_id`, which
        the server answers with the original ACK instead of writing twice (§5). Pass your own
        `client_msg_id` to be able to retry yourself after this gives up. QimError (a refusal,
        e.g. rate_limited) is raised at once: the request had no effect.
        """
        client_msg_id = client_msg_id or self.client_msg_ids()
        attempt = 0
        while True:
            try:
                return await self.request(
                    "SEND",
                    conversation_id=conversation_id,
                    client_msg_id=client_msg_id,
                    content_type=content_type,
                    payload=payload,
                )
            except (ConnectionLost, TimeoutError) as error:
                if not self.reconnect or attempt >= retries:
                    raise
                attempt += 1
                logger.info("SEND %s unanswered (%s); retry %d with the same id", client_msg_id, error, attempt)
                await self.wait_connected(timeout=self.request_timeout + self.backoff.maximum)

    async def history(
        self,
        conversation_id: str,
        before_seq: int | None = None,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """HISTORY: up to `limit` message objects (§10: 50 by default, at most 200) ascending
        by `conversation_seq`, clipped to your membership, each with the client's `render`
        decision: the newest before `before_seq` (or the head), or the oldest after `after_seq`.

        A reply cut to fit the server's frame cap holds fewer rows and says `has_more`: this
        asks on from where it stopped (after its last row with `after_seq`, before its first
        otherwise) until it has `limit` rows or no more exist.
        """
        wanted = HISTORY_DEFAULT_LIMIT if limit is None else min(limit, HISTORY_MAX_LIMIT)
        forward = after_seq is not None
        messages: list[dict[str, Any]] = []
        while True:
            fields = {"before_seq": before_seq, "after_seq": after_seq,
                      "limit": wanted - len(messages) if messages else limit}
            batch = await self.request(
                "HISTORY", conversation_id=conversation_id, **{k: v for k, v in fields.items() if v is not None}
            )
            page: list[dict[str, Any]] = batch.get("messages", [])
            messages = messages + page if forward else page + messages
            if not page or batch.get("has_more") is not True or len(messages) >= wanted:
                break
            if forward:
                after_seq = page[-1]["conversation_seq"]
            else:
                before_seq = page[0]["conversation_seq"]
        await self._render_messages(messages)
        return messages

    async def conversations(self) -> Frame:
        """CONVERSATIONS: the whole list as one `CONVERSATION_LIST {items, badge, has_more}`
        frame, newest activity first.

        A reply cut to fit the server's frame cap says `has_more` with `next_before`: this asks
        on from there and joins the pages' items (`badge` is the first page's, the whole list's
        total). A conversation whose activity moves it up while the pages are read can be left
        out; one already listed is not repeated. The next EVENT tells you to ask again anyway.
        """
        merged = await self.request("CONVERSATIONS")
        page = merged
        seen = {item["conversation_id"] for item in merged.get("items", [])}
        while page.get("has_more") is True and page.get("next_before"):
            page = await self.request("CONVERSATIONS", before=page["next_before"])
            if not page.get("items"):
                break
            fresh = [item for item in page["items"] if item["conversation_id"] not in seen]
            seen.update(item["conversation_id"] for item in fresh)
            merged["items"] = merged["items"] + fresh
        merged["has_more"] = False
        merged.pop("next_before", None)
        return merged

    async def typing(self, conversation_id: str, state: str = "start") -> None:
        """TYPING `start` or `stop`; no reply (a refusal arrives as an ERROR push)."""
        if state not in TYPING_STATES:
            raise ValueError(f"typing state must be one of {TYPING_STATES}, not {state!r}")
        await self.send_frame({"type": "TYPING", "conversation_id": conversation_id, "state": state})

    async def subscribe_presence(self, user_ids: Iterable[str]) -> dict[str, bool]:
        """PRESENCE_SUB: returns the current `{user_id: online}`; PRESENCE pushes follow each change.

        Subscriptions live on the server connection, so an `on_reconnect` hook must repeat them.
        """
        ack = await self.request("PRESENCE_SUB", user_ids=list(user_ids))
        presence: dict[str, bool] = ack["presence"]
        return presence
