"""Conversations in the admin, read-only: who is a member, and over which seqs (ADR-0021's
membership intervals). Changes go through the REST API's actions, which emit the events."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from qim.admin.base import ReadOnlyAdmin
from qim.models import Conversation, MembershipInterval

# The detail page lists this many intervals; a bigger group links to the filtered list, so a
# 50 000-member conversation never renders one enormous page.
INTERVALS_SHOWN = 200


def seqs_seen(interval: MembershipInterval) -> str:
    """The interval in words: the seqs the member sees (joined_at < seq < left_at)."""
    if interval.left_at is None:
        return f"from {interval.joined_at + 1} on (member)"
    if interval.left_at <= interval.joined_at + 1:
        return f"none (left at {interval.left_at})"
    return f"{interval.joined_at + 1} to {interval.left_at - 1} (left at {interval.left_at})"


def intervals_link(conversation_id: str, text: str) -> str:
    url = reverse("admin:qim_membershipinterval_changelist") + f"?q={conversation_id}"
    return format_html('<a href="{}">{}</a>', url, text)


@admin.display(description="members and intervals")
def intervals_table(conversation: Conversation) -> str:
    rows = list(conversation.intervals.select_related("user").order_by("user__username", "joined_at")[:INTERVALS_SHOWN + 1])
    body = format_html_join(
        "", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        ((i.user.username, i.joined_at, "-" if i.left_at is None else i.left_at, seqs_seen(i))
         for i in rows[:INTERVALS_SHOWN]),
    )
    more = intervals_link(conversation.pk, "all intervals of this conversation") if len(rows) > INTERVALS_SHOWN else ""
    return format_html(
        '<table class="qim-intervals"><thead><tr><th>user</th><th>joined_at</th><th>left_at</th>'
        "<th>sees seqs</th></tr></thead><tbody>{}</tbody></table>{}", body, more,
    )


class StillMemberFilter(admin.SimpleListFilter):
    title = "membership"
    parameter_name = "member"

    def lookups(self, request, model_admin):  # type: ignore[no-untyped-def]
        return [("current", "current members"), ("left", "left")]

    def queryset(self, request, queryset: QuerySet) -> QuerySet:  # type: ignore[no-untyped-def]
        if self.value() == "current":
            return queryset.filter(left_at__isnull=True)
        if self.value() == "left":
            return queryset.filter(left_at__isnull=False)
        return queryset


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAdmin):
    # Newest first, as a changelist without one shows; the autocomplete pages need an order too.
    ordering = ("-pk",)
    list_display = ["id", "tenant", "kind", "title", "e2ee", "members", "last_seq", "last_activity_ms", "created_at"]
    list_filter = ["tenant", "kind", "e2ee", "last_activity_ms", "created_at"]
    search_fields = ["=id", "title"]
    list_select_related = ["tenant"]
    fields = ["id", "tenant", "kind", "title", "e2ee", "last_seq", "last_activity_seq", "last_activity_ms",
              "created_at", intervals_table]
    readonly_fields = [intervals_table]

    def get_queryset(self, request):  # type: ignore[no-untyped-def]
        # A correlated count (index conversation, left_at): computed for the page's rows only,
        # where a JOIN + GROUP BY would aggregate every conversation before the LIMIT.
        current = (MembershipInterval.objects.filter(conversation=OuterRef("pk"), left_at__isnull=True)
                   .order_by().values("conversation").annotate(n=Count("*")).values("n"))
        return super().get_queryset(request).annotate(current_members=Coalesce(Subquery(current), 0))

    @admin.display(description="members", ordering="current_members")
    def members(self, conversation: Conversation) -> str:
        return intervals_link(conversation.pk, str(conversation.current_members))  # type: ignore[attr-defined]


@admin.register(MembershipInterval)
class MembershipIntervalAdmin(ReadOnlyAdmin):
    list_display = ["conversation", "user", "joined_at", "left_at", seqs_seen]
    list_filter = [StillMemberFilter, "conversation__tenant", "conversation__kind"]
    search_fields = ["=conversation__id", "=user__username"]
    list_select_related = ["conversation", "user"]
    raw_id_fields = ["conversation", "user"]
