"""The Django admin's recall action on messages goes through the ModerationService and is
audited; the log itself stays read-only there (Django test client, in process)."""

from __future__ import annotations

import pytest
from django.test import Client

from qim.models import MessageRecord, ModerationAudit
from tests.control.personas_in_process import make_cast, send_text

pytestmark = pytest.mark.django_db


def test_the_recall_action_recalls_with_no_window_and_audits_the_operator(operator_client: Client) -> None:
    cast = make_cast()
    send_text(cast.alice, cast.group, "old spam")
    target = MessageRecord.objects.get(conversation=cast.group, conversation_seq=1)
    MessageRecord.objects.filter(pk=target.pk).update(sent_at_ms=0)  # long out of any window

    listing = operator_client.get("/admin/qim/messagerecord/")
    assert listing.status_code == 200 and "Recall selected messages" in listing.content.decode()
    answer = operator_client.post(
        "/admin/qim/messagerecord/", {"action": "recall_selected", "_selected_action": [target.pk]}, follow=True
    )
    assert answer.status_code == 200 and "1 message(s) recalled." in answer.content.decode()

    target.refresh_from_db()
    assert (target.state, target.payload, target.recall_event_conversation_seq) == ("recalled", None, 2)
    event = MessageRecord.objects.get(conversation=cast.group, conversation_seq=2)
    assert (event.content_type, event.sender_id, event.target_conversation_seq) == ("qim.recall.v1", cast.admin.pk, 1)
    audit = ModerationAudit.objects.get()
    assert (audit.actor, audit.outcome, audit.event_conversation_seq, audit.conversation_seq) == (
        "operator:operator", "recalled", 2, 1,
    )


def test_the_log_cannot_be_edited_or_deleted_in_the_admin(operator_client: Client) -> None:
    cast = make_cast()
    send_text(cast.alice, cast.group, "hello")
    record = MessageRecord.objects.get()
    assert operator_client.get("/admin/qim/messagerecord/add/").status_code == 403
    assert operator_client.post(f"/admin/qim/messagerecord/{record.pk}/delete/", {"post": "yes"}).status_code == 403
    page = operator_client.get(f"/admin/qim/messagerecord/{record.pk}/change/")
    assert page.status_code == 200 and "Save" not in page.content.decode()
    assert operator_client.get("/admin/qim/moderationaudit/").status_code == 200
