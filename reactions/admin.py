"""Reactions in the admin, read-only: operators count and inspect, actions write."""

from django.contrib import admin

from reactions.models import MessageReaction, MessageReactionSummary


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(MessageReactionSummary)
class SummaryAdmin(ReadOnly):
    list_display = ["conversation", "conversation_seq", "counts", "summary_version", "detail_rows"]
    list_filter = ["tenant"]
    show_full_result_count = False


@admin.register(MessageReaction)
class ReactionAdmin(ReadOnly):
    list_display = ["conversation", "conversation_seq", "user", "reaction_key", "created_at_ms"]
    list_filter = ["tenant"]
    raw_id_fields = ["user", "conversation"]
    show_full_result_count = False
