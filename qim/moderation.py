"""The ModerationService: recalls with no time window, by tenant admins (REST) and operators
(the Django admin), each act audited in the act's own transaction (design §2)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from qim.actions.log import lock_conversation
from qim.actions.recall import LoggedRecall, do_log_recall_once, recall_in_design_order
from qim.clock import now_ms
from qim.errors import Refused
from qim.models import Conversation, MessageRecord, ModerationAudit, User
from qim.queries.control import access_timeline_message


@dataclass(frozen=True)
class Moderator:
    """Who acts. `user` is the IM user the event names as its actor_id; `device_id` the device
    the act came from (none from the admin site); `description` is what the audit keeps."""

    tenant_id: int
    user: User
    device_id: str | None
    description: str

    @classmethod
    def tenant_admin(cls, user: User, device_id: str | None) -> "Moderator":
        if not user.is_tenant_admin:
            raise Refused("forbidden", "tenant admins only")
        return cls(user.tenant_id, user, device_id, f"user:{user.username}")

    @classmethod
    def operator(cls, tenant_id: int, operator_name: str) -> "Moderator":
        """An operator of the Django admin, acting as `operator_stand_in`; the audit names the
        operator."""
        return cls(tenant_id, operator_stand_in(tenant_id), None, f"operator:{operator_name}")


def operator_stand_in(tenant_id: int) -> User:
    """The IM user an operator of the Django admin acts as: events need one as their actor, so
    the tenant's first admin stands in. `conflict` when the tenant has none."""
    admin = User.objects.filter(tenant_id=tenant_id, is_tenant_admin=True).order_by("pk").first()
    if admin is None:
        raise Refused("conflict", "this tenant has no admin user to act as")
    return admin


@dataclass(frozen=True)
class ModerationResult:
    event_conversation_seq: int
    # False when the message was recalled already: the answer is that recall's event.
    created: bool


class ModerationService:
    """Moderation acts. `clock` is an attribute so tests can swap it."""

    clock: Callable[[], int] = staticmethod(now_ms)

    def recall(
        self, moderator: Moderator, conversation_id: str, conversation_seq: int, reason: str = ""
    ) -> ModerationResult:
        """Recall any message of the moderator's tenant, however old; answers the seq of its
        qim.recall.v1 event (the existing one if it was recalled already).

        Commits twice in the design's order, like a self recall; the audit row is written with
        the event. Refuses `not_found` for other tenants' conversations, control events and
        unknown seqs, writing nothing (no audit either: nothing was done).
        """

        def step_1() -> LoggedRecall:
            conversation = lock_conversation_of_tenant(conversation_id, moderator.tenant_id)
            target = access_timeline_message(conversation, conversation_seq)
            now = self.clock()
            logged = do_log_recall_once(
                conversation, target, actor=moderator.user, device_id=moderator.device_id, now=now, moderated=True
            )
            do_audit_recall(moderator, target, logged.event, created=logged.created, reason=reason, now=now)
            return logged

        logged = recall_in_design_order(step_1)
        return ModerationResult(logged.event.conversation_seq, logged.created)


def lock_conversation_of_tenant(conversation_id: str, tenant_id: int) -> Conversation:
    """lock_conversation, answering `not_found` for another tenant's (or no) conversation."""
    if not Conversation.objects.filter(pk=conversation_id, tenant_id=tenant_id).exists():
        raise Refused("not_found", "no such conversation")
    return lock_conversation(conversation_id)


def do_audit_recall(
    moderator: Moderator, target: MessageRecord, event: MessageRecord, *, created: bool, reason: str, now: int
) -> ModerationAudit:
    """The audit row of one moderation recall; joins the caller's transaction."""
    return ModerationAudit.objects.create(
        tenant_id=moderator.tenant_id,
        actor=moderator.description,
        action=ModerationAudit.RECALL,
        outcome=ModerationAudit.RECALLED if created else ModerationAudit.ALREADY_RECALLED,
        conversation_id=target.conversation_id,
        conversation_seq=target.conversation_seq,
        message_id=target.message_id,
        event_conversation_seq=event.conversation_seq,
        reason=reason,
        at_ms=now,
    )
