"""Typed helpers for the conversation requests (protocol §6: SEND, HISTORY, CONVERSATIONS,
TYPING; §7 PRESENCE_SUB; §8: MARK_READ, RECALL, EDIT), mixed into QimClient."""

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
        self,
        conversation_id: str,
        text: str,
        client_msg_id: str | None = None,
        *,
        retries: int = 3,
        mentions: Iterable[str] | None = None,
        mention_all: bool = False,
        reply_to: int | None = None,
    ) -> Frame:
        """SEND `{"text": text}`; returns the ACK `{message_id, conversation_seq, sent_at_ms}`.

        Mentions and replies as `send_message`'s; retries like it. Raises QimError when refused.
        """
        return await self.send_message(
            conversation_id, "text", {"text": text}, client_msg_id, retries=retries,
            mentions=mentions, mention_all=mention_all, reply_to=reply_to,
        )

    async def send_message(
        self,
        conversation_id: str,
        content_type: str,
        payload: Any,
        client_msg_id: str | None = None,
        *,
        retries: int = 3,
        mentions: Iterable[str] | None = None,
        mention_all: bool = False,
        reply_to: int | None = None,
    ) -> Frame:
        """SEND one message; returns its ACK.

        `mentions` (user ids, current members, at most the server's max_mentions_per_message),
        `mention_all` (@all, as the group's mention_all_policy allows) and `reply_to` (the
        `conversation_seq` of a message you can see) are protocol §17's; the server does not
        read the payload, so write the @names into the text yourself.

        When the socket drops before the ACK (ConnectionLost), or no ACK comes in time
        (TimeoutError), the outcome is unknown: with `reconnect` on this waits for the next
        session and sends again, up to `retries` times, with the SAME `client_msg_id`, which
        the server answers with the original ACK instead of writing twice (§6.1). Pass your own
        `client_msg_id` to be able to retry yourself after this gives up. QimError (a refusal,
        e.g. rate_limited) is raised at once: the request had no effect.
        """
        client_msg_id = client_msg_id or self.client_msg_ids()
        fields: dict[str, Any] = {
            "conversation_id": conversation_id, "client_msg_id": client_msg_id,
            "content_type": content_type, "payload": payload,
        }
        fields.update(_addressing(mentions, mention_all, reply_to))
        return await self._request_retrying("SEND", retries, f"SEND {client_msg_id}", **fields)

    async def edit_message(
        self,
        conversation_id: str,
        conversation_seq: int,
        payload: Any,
        *,
        mentions: Iterable[str] | None = None,
        mention_all: bool | None = None,
        retries: int = 3,
    ) -> Frame:
        """EDIT one of your messages (§8); returns the ACK `{event_conversation_seq}`.

        `mentions` and `mention_all`, when given, replace the message's (§17.2); left out, they
        stay as they were. An EDIT repeating the newest edit is answered with that edit's seq
        and writes nothing, so it is retried like SEND after a lost answer.
        """
        fields: dict[str, Any] = {
            "conversation_id": conversation_id, "conversation_seq": conversation_seq, "payload": payload,
        }
        if mentions is not None:
            fields["mentions"] = list(mentions)
        if mention_all is not None:
            fields["mention_all"] = mention_all
        return await self._request_retrying("EDIT", retries, f"EDIT {conversation_id}#{conversation_seq}", **fields)

    async def edit_text(
        self,
        conversation_id: str,
        conversation_seq: int,
        text: str,
        *,
        mentions: Iterable[str] | None = None,
        mention_all: bool | None = None,
    ) -> Frame:
        """EDIT a text message to `{"text": text}`; as `edit_message`."""
        return await self.edit_message(
            conversation_id, conversation_seq, {"text": text}, mentions=mentions, mention_all=mention_all
        )

    async def recall(self, conversation_id: str, conversation_seq: int, *, retries: int = 3) -> Frame:
        """RECALL one of your messages (§8); returns the ACK `{event_conversation_seq}`. A repeat
        answers the existing recall's seq, so it is retried like SEND."""
        return await self._request_retrying(
            "RECALL", retries, f"RECALL {conversation_id}#{conversation_seq}",
            conversation_id=conversation_id, conversation_seq=conversation_seq,
        )

    async def mark_read(self, conversation_id: str, read_conversation_seq: int, *, retries: int = 3) -> Frame:
        """MARK_READ (§8): the read cursor moves forward only; returns the ACK
        `{read_conversation_seq, unread}`. It also clears the mentions up to there (§17.2)."""
        return await self._request_retrying(
            "MARK_READ", retries, f"MARK_READ {conversation_id}",
            conversation_id=conversation_id, read_conversation_seq=read_conversation_seq,
        )

    async def _request_retrying(self, frame_type: str, retries: int, what: str, **fields: Any) -> Frame:
        """`request`, sent again after ConnectionLost or TimeoutError (with `reconnect` on, up to
        `retries` times, once the next session is up): only for requests the server answers
        the same way when repeated."""
        attempt = 0
        while True:
            try:
                return await self.request(frame_type, **fields)
            except (ConnectionLost, TimeoutError) as error:
                if not self.reconnect or attempt >= retries:
                    raise
                attempt += 1
                logger.info("%s unanswered (%s); retry %d with the same fields", what, error, attempt)
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


def _addressing(mentions: Iterable[str] | None, mention_all: bool, reply_to: int | None) -> dict[str, Any]:
    """SEND's §17 fields, only those given (a plain SEND stays as it was)."""
    fields: dict[str, Any] = {}
    if mentions is not None:
        fields["mentions"] = list(mentions)
    if mention_all:
        fields["mention_all"] = True
    if reply_to is not None:
        fields["reply_to"] = reply_to
    return fields
