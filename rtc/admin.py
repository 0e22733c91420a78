"""Operators see ended calls and the VoIP push counters in the admin (read-only)."""

from django.contrib import admin

from qim.admin.base import ReadOnlyAdmin
from rtc.models import CallRecord, VoipPushQuota


@admin.register(CallRecord)
class CallRecordAdmin(ReadOnlyAdmin):
    list_display = ("call_id", "tenant", "caller_id", "callee_id", "outcome", "duration_s", "ended_at_ms")
    list_filter = ("outcome", "tenant", "ended_at_ms")
    search_fields = ("call_id", "caller_id", "callee_id")
    readonly_fields = [f.name for f in CallRecord._meta.fields]


@admin.register(VoipPushQuota)
class VoipPushQuotaAdmin(ReadOnlyAdmin):
    list_display = ("device", "day", "count")
    list_filter = ("day",)
    readonly_fields = ("device", "day", "count")
