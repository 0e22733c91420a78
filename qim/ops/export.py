"""JSON-lines exports: a whole tenant (`qim_export`) or one user's data (`qim_user_export`, a
data-protection request). Rows are read in primary-key pages and written as they come, so no
tenant is ever held in memory whole; no secret (password hash, token, push credential) is
ever written. Each line is one object with a `type`; the last is `{"type": "end", "counts"}`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import IO, Any

from django.db.models import QuerySet

from qim.models import Conversation, Device, MembershipInterval, MessageRecord, ReadCursor, Tenant, User

# Rows read per query.
PAGE = 2000

USER_FIELDS = {"user_id": "username", "display_name": "display_name",
               "is_tenant_admin": "is_tenant_admin", "is_active": "is_active", "created_at": "created_at"}
# Push tokens are credentials: a device is exported without them.
DEVICE_FIELDS = {"user_id": "user__username", "device_id": "device_id",
                 "push_platform": "push_platform", "created_at": "created_at"}
CONVERSATION_FIELDS = {"conversation_id": "id", "kind": "kind", "title": "title", "e2ee": "e2ee",
                       "last_seq": "last_seq", "created_at": "created_at"}
MEMBERSHIP_FIELDS = {"conversation_id": "conversation_id", "user_id": "user__username",
                     "joined_at": "joined_at", "left_at": "left_at"}
MESSAGE_FIELDS = {
    "conversation_id": "conversation_id", "conversation_seq": "conversation_seq",
    "message_id": "message_id", "kind": "kind", "sender_id": "sender__username",
    "sender_device_id": "sender_device_id", "content_type": "content_type", "payload": "payload",
    "sent_at_ms": "sent_at_ms", "state": "state", "edited_at_ms": "edited_at_ms",
    "target_conversation_seq": "target_conversation_seq",
}
READ_CURSOR_FIELDS = {"conversation_id": "conversation_id", "read_conversation_seq": "read_conversation_seq"}


def export_tenant(tenant: Tenant, out: IO[str]) -> Counter[str]:
    """Write the tenant, its users and devices, conversations, memberships and messages."""
    sections = [
        ("user", User.objects.filter(tenant=tenant), USER_FIELDS),
        ("device", Device.objects.filter(user__tenant=tenant), DEVICE_FIELDS),
        ("conversation", Conversation.objects.filter(tenant=tenant), CONVERSATION_FIELDS),
        ("membership", MembershipInterval.objects.filter(conversation__tenant=tenant), MEMBERSHIP_FIELDS),
        ("message", MessageRecord.objects.filter(tenant=tenant), MESSAGE_FIELDS),
    ]
    return _write(out, _tenant_line(tenant), sections)


def export_user(user: User, out: IO[str]) -> Counter[str]:
    """Write one user's account, devices, memberships (with their conversations), read
    positions and every message they sent; what others sent them stays others' data."""
    conversations = MembershipInterval.objects.filter(user=user).values("conversation_id")
    sections = [
        ("user", User.objects.filter(pk=user.pk), USER_FIELDS),
        ("device", Device.objects.filter(user=user), DEVICE_FIELDS),
        ("conversation", Conversation.objects.filter(pk__in=conversations), CONVERSATION_FIELDS),
        ("membership", MembershipInterval.objects.filter(user=user), MEMBERSHIP_FIELDS),
        ("read_cursor", ReadCursor.objects.filter(user=user), READ_CURSOR_FIELDS),
        ("message", MessageRecord.objects.filter(sender=user), MESSAGE_FIELDS),
    ]
    return _write(out, _tenant_line(user.tenant), sections)


def _tenant_line(tenant: Tenant) -> dict[str, Any]:
    return {"type": "tenant", "tenant": tenant.name, "message_retention_s": tenant.message_retention_s,
            "created_at": tenant.created_at}


def _write(out: IO[str], first: dict[str, Any],
           sections: Iterable[tuple[str, QuerySet[Any], dict[str, str]]]) -> Counter[str]:
    counts: Counter[str] = Counter()
    out.write(_line(first))
    for kind, rows, fields in sections:
        for row in _pages(rows, fields):
            out.write(_line({"type": kind, **row}))
            counts[kind] += 1
    out.write(_line({"type": "end", "counts": dict(counts)}))
    return counts


def _pages(rows: QuerySet[Any], fields: dict[str, str]) -> Iterator[dict[str, Any]]:
    """Each row as {exported name: value of its lookup in `fields`}, PAGE rows a query by
    primary key (keyset paging: no OFFSET, no server-side cursor)."""
    lookups = list(fields.values())
    after = None
    while True:
        page_rows = rows.order_by("pk")
        if after is not None:
            page_rows = page_rows.filter(pk__gt=after)
        page = list(page_rows.values_list("pk", *lookups)[:PAGE])
        for _, *values in page:
            row = dict(zip(fields, values))
            if "payload" in row and row["payload"] is not None:
                # Stored as the compact JSON text the client sent: exported as that JSON.
                row["payload"] = json.loads(row["payload"])
            yield row
        if len(page) < PAGE:
            return
        after = page[-1][0]


def _line(row: dict[str, Any]) -> str:
    return json.dumps(row, default=_encode, ensure_ascii=False, separators=(",", ":")) + "\n"


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot export {type(value).__name__}")
