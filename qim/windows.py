"""The self recall and edit windows (design §2: 2 min and 15 min by default), as deadlines."""

from __future__ import annotations

from qim.conf import limit
from qim.models import MessageRecord


def recall_deadline_ms(record: MessageRecord) -> int:
    """Its sender may recall a message before this instant (recall_self_window_s)."""
    return record.sent_at_ms + int(limit("recall_self_window_s") * 1000)


def edit_deadline_ms(record: MessageRecord) -> int:
    """Its sender may edit a message before this instant (edit_self_window_s)."""
    return record.sent_at_ms + int(limit("edit_self_window_s") * 1000)
