"""SYNC's read as one SQL statement into plain rows, not model instances.

A reconnect storm's SYNCs are read together (qim/queries/mailbox.py `sync_pages`); through the
ORM, building the OR of every cursor, compiling it and making an entry, a conversation, a
message and its sender instance per row took most of that read (docs/performance.md,
"Lean handshake, upgrade, frame and per-socket paths"). The rows here carry the same attributes
under the same names (`entry.message.sender.username`, `entry.conversation.e2ee`), so
qim/render.py renders them exactly as it renders models."""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db import connection

from qim.models import Conversation, MessageRecord, UserMailboxEntry
from qim.infra.stored_json import loads


class RecordRow:
    """What qim/render.py reads of a MessageRecord. It is its own `sender` (render reads the
    sender's `username` only): one object per message row, not two, for the collector to walk
    while a reconnect storm's SYNCs are in flight."""

    __slots__ = ("tenant_id", "conversation_id", "conversation_seq", "message_id", "kind", "sender_id", "username",
                 "sender_device_id", "content_type", "payload", "sent_at_ms", "state", "edited_at_ms",
                 "target_conversation_seq", "timeline_visible", "mentions", "mention_all", "reply_to_seq")

    def __init__(self, conversation_id: str, values: tuple[Any, ...]) -> None:
        (self.tenant_id, self.conversation_seq, self.message_id, self.kind, self.sender_id, self.username,
         self.sender_device_id, self.content_type, self.payload, self.sent_at_ms, self.state, self.edited_at_ms,
         self.target_conversation_seq, timeline_visible, self.mentions, mention_all, self.reply_to_seq) = values
        self.conversation_id = conversation_id
        self.timeline_visible = bool(timeline_visible)
        self.mention_all = bool(mention_all)

    @property
    def sender(self) -> "RecordRow":
        return self


class EntryRow:
    """What qim/render.py and qim/queries/mailbox.py read of a UserMailboxEntry. It is its own
    `conversation` (render reads the conversation's `e2ee` only), as RecordRow is its sender."""

    __slots__ = ("user_id", "mailbox_seq", "kind", "conversation_id", "control", "origin_device_id",
                 "e2ee", "message")

    def __init__(self, row: tuple[Any, ...]) -> None:
        (self.user_id, self.mailbox_seq, self.kind, self.conversation_id, control, self.origin_device_id,
         e2ee, message_pk) = row[:8]
        self.control = loads(control) if isinstance(control, (str, bytes)) else control
        self.e2ee = bool(e2ee)
        self.message = None if message_pk is None else RecordRow(self.conversation_id, row[8:])

    @property
    def conversation(self) -> "EntryRow":
        return self


def _column(model: Any, name: str) -> str:
    return connection.ops.quote_name(model._meta.get_field(name).column)


def _pk(model: Any) -> str:
    return connection.ops.quote_name(model._meta.pk.column)


@cache
def _select() -> str:
    """The statement up to its WHERE: entries ranked per user, with their conversation's e2ee,
    their message (if any) and its sender's username. Built once from the models' metadata."""
    q = connection.ops.quote_name
    sender = MessageRecord._meta.get_field("sender").related_model
    entry = [_column(UserMailboxEntry, name) for name in
             ("user", "mailbox_seq", "kind", "conversation", "control", "origin_device_id", "message")]
    record = [f"m.{_column(MessageRecord, name)}" for name in
              ("tenant", "conversation_seq", "message_id", "kind", "sender")]
    record += ["u." + _column(sender, "username")]
    record += [f"m.{_column(MessageRecord, name)}" for name in
               ("sender_device_id", "content_type", "payload", "sent_at_ms", "state", "edited_at_ms",
                "target_conversation_seq", "timeline_visible", "mentions", "mention_all", "reply_to_seq")]
    sender = MessageRecord._meta.get_field("sender").related_model
    user_col, seq_col, message_col, conversation_col = entry[0], entry[1], entry[6], entry[3]
    return (
        f"SELECT e.{user_col}, e.{seq_col}, e.{entry[2]}, e.{conversation_col}, e.{entry[4]}, e.{entry[5]}, "
        f"c.{_column(Conversation, 'e2ee')}, e.{message_col}, {', '.join(record)} "
        f"FROM (SELECT {', '.join(entry)}, ROW_NUMBER() OVER (PARTITION BY {user_col} ORDER BY {seq_col}) AS qim_rank "
        f"FROM {q(UserMailboxEntry._meta.db_table)} WHERE {{where}}) e "
        f"INNER JOIN {q(Conversation._meta.db_table)} c ON c.{_pk(Conversation)} = e.{conversation_col} "
        f"LEFT OUTER JOIN {q(MessageRecord._meta.db_table)} m ON m.{_pk(MessageRecord)} = e.{message_col} "
        f"LEFT OUTER JOIN {q(sender._meta.db_table)} u ON u.{_pk(sender)} = m.{_column(MessageRecord, 'sender')} "
        f"WHERE e.qim_rank <= %s ORDER BY e.{user_col}, e.{seq_col}"
    )


def entry_rows(cursors: list[tuple[int, int]], per_user: int) -> list[EntryRow]:
    """Up to `per_user` entries after each (user_pk, after_mailbox_seq), one pair per user,
    ordered by user then mailbox_seq."""
    user_col, seq_col = _column(UserMailboxEntry, "user"), _column(UserMailboxEntry, "mailbox_seq")
    where = " OR ".join([f"({user_col} = %s AND {seq_col} > %s)"] * len(cursors))
    params = [value for pair in cursors for value in pair] + [per_user]
    with connection.cursor() as cursor:
        cursor.execute(_select().replace("{where}", where), params)
        return [EntryRow(row) for row in cursor.fetchall()]
