"""Reads that authorize a call: the conversation is the caller's tenant's, both parties are
members now, and the call_id was never recorded."""

from __future__ import annotations

from qim.errors import Refused
from qim.models import MembershipInterval
from qim.queries.conversations import access_conversation, require_current_member
from rtc.models import CallRecord


def access_call_parties(tenant_id: int, caller_pk: int, conversation_id: str, callee_id: str, call_id: str) -> None:
    """`not_found` for a conversation outside the tenant, `forbidden` when the caller or the
    callee is not a current member, `conflict` for a call_id an ended call already used."""
    conversation = access_conversation(tenant_id, conversation_id)
    require_current_member(conversation, caller_pk)
    callee_is_member = MembershipInterval.objects.filter(
        conversation=conversation, user__tenant_id=tenant_id, user__username=callee_id, left_at__isnull=True
    ).exists()
    if not callee_is_member:
        raise Refused("forbidden", f"{callee_id} is not a member of this conversation")
    if CallRecord.objects.filter(tenant_id=tenant_id, call_id=call_id).exists():
        raise Refused("conflict", f"call_id {call_id!r} was already used")
