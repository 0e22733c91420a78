"""What a log append is given (LogRow) and answers (Appended): shared by the append
(qim/actions/log.py) and its pushes (qim/actions/log_pushes.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from qim.content_types import OWN_SEQ, TypePolicy
from qim.infra import codec
from qim.models import MessageRecord, User, UserMailboxEntry
from qim.node.conversation_push import ConversationPush
from qim.notify import UserPush


@dataclass(frozen=True)
class Appended:
    record: MessageRecord
    mailbox_seqs: dict[int, int]
    push_tasks: int
    # The EVENT push of this row; already queued on commit unless `defer_push`.
    push: UserPush | None = None
    # The live EVENT to members without an entry (design §4.3), deferred with `push`.
    live_push: UserPush | ConversationPush | None = None


@dataclass(frozen=True)
class LogRow:
    """One row to append: its writer, its type and its payload."""

    sender: User
    sender_device_id: str
    policy: TypePolicy
    payload_json: str | None
    kind: str = MessageRecord.MESSAGE
    client_msg_id: str | None = None
    target_conversation_seq: int | None = None
    origin_device_id: str | None = None
    # Whom the row mentions (user pk -> user id, in the order sent) and whether it is an @all.
    mentioned: dict[int, str] = field(default_factory=dict)
    mention_all: bool = False
    reply_to_seq: int | None = None
    # An edit event's new mentions (issue #34): the `mentions` JSON and `mention_all` it
    # carries, written on its row before its EVENT is rendered. They count nothing here: the
    # target's rows do, once the edit applies (qim/actions/mentions.py).
    carried_mentions: tuple[str, bool] | None = None

    def mentions(self, user_pk: int) -> bool:
        return self.mention_all or user_pk in self.mentioned

    def mention_columns(self) -> dict[str, str | bool | None]:
        """The row's `mentions` and `mention_all` columns."""
        if self.carried_mentions is not None:
            mentions, everyone = self.carried_mentions
            return {"mentions": mentions, "mention_all": everyone}
        return {"mentions": codec.encode(list(self.mentioned.values())) if self.mentioned else None,
                "mention_all": self.mention_all}

    @property
    def moves_position(self) -> bool:
        # anchor_target rows never move the latest position (design §2: two recalls in a
        # row), whatever their type says; the row records the effective flag.
        return self.policy.affects_session_order and self.policy.anchor_mode == OWN_SEQ

    @property
    def entry_kind(self) -> str:
        return UserMailboxEntry.MESSAGE if self.kind == MessageRecord.MESSAGE else UserMailboxEntry.CONTROL


@dataclass(frozen=True)
class AllMembersBut:
    """A row's live audience in a large group (design §4.3): every current member but these
    user ids (who get a mailbox entry instead), resolved by each node
    (qim/node/conversation_push.py), never listed here."""

    exclude: frozenset[str]
