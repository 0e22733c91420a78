"""Reactions in the admin, read-only: operators count and inspect, actions write."""

from django.contrib import admin

from qim.admin.base import ReadOnlyAdmin
from reactions.models import MessageReaction, MessageReactionSummary


@admin.register(MessageReactionSummary)
class SummaryAdmin(ReadOnlyAdmin):
    list_display = ["conversation", "conversation_seq", "counts", "summary_version", "detail_rows"]
    list_filter = ["tenant"]


@admin.register(MessageReaction)
class ReactionAdmin(ReadOnlyAdmin):
    list_display = ["conversation", "conversation_seq", "user", "reaction_key", "created_at_ms"]
    list_filter = ["tenant", "created_at_ms"]
    raw_id_fields = ["user", "conversation"]
