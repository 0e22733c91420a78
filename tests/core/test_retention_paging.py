"""Retention and export in process (pytest-django): their keyset paging over more rows than
a page (pages shrunk to 2-3 rows), and the tenant's retention in the operators' admin."""

from __future__ import annotations

import io
import json

import pytest
from django.test import Client

import qim.ops.export
import qim.ops.retention
from qim.actions.accounts import do_bootstrap_tenant, do_create_user
from qim.actions.conversations import do_create_conversation
from qim.clock import now_ms
from qim.models import Conversation, MessageRecord, Tenant, User, UserMailboxEntry, UserMailboxHead

pytestmark = pytest.mark.django_db
DAY_MS = 24 * 3600 * 1000


def log(conversation: Conversation, sender: User, texts: list[str], sent_at_ms: int) -> None:
    """Rows as SEND writes them: the next seqs, and one mailbox entry per member."""
    members = list(conversation.intervals.filter(left_at__isnull=True).values_list("user_id", flat=True))
    for text in texts:
        conversation.last_seq += 1
        record = MessageRecord.objects.create(
            tenant_id=conversation.tenant_id, conversation=conversation, conversation_seq=conversation.last_seq,
            sender=sender, content_type="text", payload=json.dumps({"text": text}), sent_at_ms=sent_at_ms,
        )
        for user_pk in members:
            head, _ = UserMailboxHead.objects.get_or_create(user_id=user_pk)
            head.mailbox_head += 1
            head.save()
            UserMailboxEntry.objects.create(
                tenant_id=conversation.tenant_id, user_id=user_pk, mailbox_seq=head.mailbox_head, kind="message",
                conversation=conversation, message=record, created_at_ms=sent_at_ms,
            )
    conversation.save(update_fields=["last_seq"])


def populate(tenant_name: str, users: int, groups: int, sent_at_ms: int) -> tuple[Tenant, list[Conversation]]:
    boot = do_bootstrap_tenant(tenant_name, "admin", "pw")
    people = [do_create_user(boot.tenant, f"u{i}", "pw") for i in range(users)]
    conversations = []
    for g in range(groups):
        conversation, _ = do_create_conversation(
            boot.admin, kind="group", title=f"g{g}", member_user_ids=[p.username for p in people], e2ee=False
        )
        log(conversation, boot.admin, [f"{tenant_name} {g}.{i}" for i in range(3)], sent_at_ms)
        conversations.append(conversation)
    return boot.tenant, conversations


def test_the_export_pages_through_more_rows_than_a_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qim.ops.export, "PAGE", 3)
    tenant, conversations = populate("acme", users=7, groups=4, sent_at_ms=now_ms())
    populate("globex", users=2, groups=1, sent_at_ms=now_ms())
    out = io.StringIO()

    counts = qim.ops.export.export_tenant(tenant, out)

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert counts == {"user": 8, "device": 1, "conversation": 4, "membership": 32, "message": 12}
    messages = [(m["conversation_id"], m["payload"]["text"]) for m in lines if m["type"] == "message"]
    assert len(set(messages)) == 12 and all(text.startswith("acme") for _, text in messages)
    assert {c["conversation_id"] for c in lines if c["type"] == "conversation"} == {c.pk for c in conversations}


def test_retention_pages_through_more_users_and_conversations_than_a_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qim.ops.retention, "ID_PAGE", 2)
    now = now_ms()
    tenant, conversations = populate("acme", users=5, groups=5, sent_at_ms=now - 2 * DAY_MS)
    other, _ = populate("globex", users=2, groups=1, sent_at_ms=now - 2 * DAY_MS)
    log(conversations[0], User.objects.get(tenant=tenant, username="u0"), ["fresh"], now)
    Tenant.objects.filter(pk__in=[tenant.pk, other.pk]).update(message_retention_s=24 * 3600)
    tenant.refresh_from_db()

    report = qim.ops.retention.apply_retention(tenant, batch=4, now=now)

    assert report.deleted["qim.MessageRecord"] == 15 and report.conversations == 5
    assert report.deleted["qim.UserMailboxEntry"] == 15 * 6
    assert list(MessageRecord.objects.filter(tenant=tenant).values_list("payload", flat=True)) == ['{"text": "fresh"}']
    assert UserMailboxEntry.objects.filter(tenant=tenant).count() == 6
    assert MessageRecord.objects.filter(tenant=other).count() == 3


def test_the_admin_edits_a_tenants_retention(operator_client: Client) -> None:
    tenant = do_bootstrap_tenant("acme", "boss", "pw").tenant
    page = operator_client.get(f"/admin/qim/tenant/{tenant.pk}/change/")
    assert page.status_code == 200 and "message_retention_s" in page.content.decode()
    saved = operator_client.post(
        f"/admin/qim/tenant/{tenant.pk}/change/", {"name": "acme", "message_retention_s": "86400"}
    )
    assert saved.status_code == 302, saved.content.decode()[:2000]
    tenant.refresh_from_db()
    assert tenant.message_retention_s == 86400
    assert "86400" in operator_client.get("/admin/qim/tenant/").content.decode()
