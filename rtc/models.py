"""Rows the RTC lifecycle keeps in the database: one CallRecord per ended call, and the
per-device daily VoIP push counters."""

from __future__ import annotations

from django.db import models

from qim.models import Conversation, Device, MessageRecord, Tenant


class CallRecord(models.Model):
    """The ended call whose qim.call_record.v1 message is in the log. Written in the same
    transaction as that message: the unique (tenant, call_id) makes it exactly one even when
    both parties hang up at once or two nodes race to finish the call, and keeps a call_id
    from ever being reused for a new invite."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE)
    call_id = models.CharField(max_length=64)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+")
    message = models.ForeignKey(MessageRecord, on_delete=models.CASCADE, related_name="+")
    caller_id = models.CharField(max_length=64)
    callee_id = models.CharField(max_length=64)
    outcome = models.CharField(max_length=16)
    duration_s = models.PositiveIntegerField(default=0)
    started_at_ms = models.BigIntegerField()
    ended_at_ms = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "call_id"], name="call_record_unique_per_call")
        ]

    def __str__(self) -> str:
        return f"call {self.call_id} {self.caller_id}->{self.callee_id}: {self.outcome}"


class VoipPushQuota(models.Model):
    """How many VoIP pushes one device was sent on one UTC day (design §5:
    rtc_voip_push_daily_quota). Taken with one conditional UPDATE, so nodes never overshoot."""

    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["device", "day"], name="voip_quota_unique_per_device_day")
        ]

    def __str__(self) -> str:
        return f"{self.device} {self.day}: {self.count}"
