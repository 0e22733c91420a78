"""Conversations in the admin: who is a member, over which seqs (ADR-0021's membership
intervals), in which role and tier. An operator may rename a group, set its policies and its
default tier, and change roles by the membership list's actions; each goes through the group
actions (qim/admin/group_changes.py), which emit the events. Everything else is read-only."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from qim.admin.base import ReadableDatesAdmin, ReadOnlyAdmin
from qim.admin.group_changes import save_group_settings, set_roles, stand_in_refusal
from qim.models import Conversation, MembershipInterval
from qim.queries.unread import tier_of

# The detail page lists this many intervals; a bigger group links to the filtered list, so a
# 50 000-member conversation never renders one enormous page.
INTERVALS_SHOWN = 200
# What an operator may change of a group; the rest of the row is written by actions only.
EDITABLE = ["title", "mention_all_policy", "add_members_policy", "default_tier"]


def seqs_seen(interval: MembershipInterval) -> str:
    """The interval in words: the seqs the member sees (joined_at < seq < left_at)."""
    if interval.left_at is None:
        return f"from {interval.joined_at + 1} on (member)"
    if interval.left_at <= interval.joined_at + 1:
        return f"none (left at {interval.left_at})"
    return f"{interval.joined_at + 1} to {interval.left_at - 1} (left at {interval.left_at})"


@admin.display(description="tier")
def tier_shown(interval: MembershipInterval) -> str:
    """The member's tier, and whether they chose it or follow the group's default."""
    return f"{interval.tier} (chosen)" if interval.tier else f"{tier_of(interval)} (group default)"


def intervals_link(conversation_id: str, text: str) -> str:
    url = reverse("admin:qim_membershipinterval_changelist") + f"?q={conversation_id}"
    return format_html('<a href="{}">{}</a>', url, text)


@admin.display(description="members and intervals")
def intervals_table(conversation: Conversation) -> str:
    rows = list(conversation.intervals.select_related("user").order_by("user__username", "joined_at")[:INTERVALS_SHOWN + 1])
    body = format_html_join(
        "", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        ((i.user.username, i.role, tier_shown(i), i.joined_at, "-" if i.left_at is None else i.left_at, seqs_seen(i))
         for i in rows[:INTERVALS_SHOWN]),
    )
    more = "all intervals of this conversation" if len(rows) > INTERVALS_SHOWN else "change roles"
    return format_html(
        '<table class="qim-intervals"><thead><tr><th>user</th><th>role</th><th>tier</th><th>joined_at</th>'
        "<th>left_at</th><th>sees seqs</th></tr></thead><tbody>{}</tbody></table><p>{}</p>",
        body, intervals_link(conversation.pk, more),
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


class TierFilter(admin.SimpleListFilter):
    """A chosen tier, or none chosen (the group's default): blank is not one of the field's
    choices, so Django's own filter could not offer it."""

    title = "tier"
    parameter_name = "tier"

    def lookups(self, request, model_admin):  # type: ignore[no-untyped-def]
        return [(tier, f"{tier} (chosen)") for tier, _ in MembershipInterval.TIERS] + [("default", "group default")]

    def queryset(self, request, queryset: QuerySet) -> QuerySet:  # type: ignore[no-untyped-def]
        if self.value() == "default":
            return queryset.filter(tier="")
        return queryset.filter(tier=self.value()) if self.value() else queryset


class GroupSettingsForm(forms.ModelForm):
    """The editable settings of a group; refused before anything is saved when no user of the
    tenant can stand in as the events' actor."""

    class Meta:
        model = Conversation
        fields = EDITABLE

    def clean(self) -> dict:
        cleaned = super().clean()
        if self.has_changed() and (refusal := stand_in_refusal(self.instance.tenant_id)):
            raise forms.ValidationError(refusal)
        return cleaned


@admin.register(Conversation)
class ConversationAdmin(ReadableDatesAdmin):
    # Newest first, as a changelist without one shows; the autocomplete pages need an order too.
    ordering = ("-pk",)
    list_display = ["id", "tenant", "kind", "title", "e2ee", "members", "default_tier", "last_seq", "last_activity_ms",
                    "created_at"]
    list_filter = ["tenant", "kind", "e2ee", "mention_all_policy", "add_members_policy", "default_tier",
                   "last_activity_ms", "created_at"]
    search_fields = ["=id", "title"]
    list_select_related = ["tenant"]
    show_full_result_count = False
    form = GroupSettingsForm
    fieldsets = [
        (None, {"fields": ["id", "tenant", "kind", "e2ee", "created_at"]}),
        ("Group settings", {
            "fields": EDITABLE,
            "description": "Saving logs a qim.group.v1 event (title, policies), acted by the tenant's first admin. "
                           "A default tier writes no event; it recomputes the badges of the members it moves.",
        }),
        ("Log", {"fields": ["member_count", "last_seq", "last_activity_seq", "last_activity_ms", "counted_total"]}),
        ("Members", {"fields": [intervals_table]}),
    ]
    readonly_fields = ["id", "tenant", "kind", "e2ee", "created_at", "member_count", "last_seq", "last_activity_seq",
                       "counted_total", intervals_table]

    def get_queryset(self, request):  # type: ignore[no-untyped-def]
        # A correlated count (index conversation, left_at): computed for the page's rows only,
        # where a JOIN + GROUP BY would aggregate every conversation before the LIMIT.
        current = (MembershipInterval.objects.filter(conversation=OuterRef("pk"), left_at__isnull=True)
                   .order_by().values("conversation").annotate(n=Count("*")).values("n"))
        return super().get_queryset(request).annotate(current_members=Coalesce(Subquery(current), 0))

    @admin.display(description="members", ordering="current_members")
    def members(self, conversation: Conversation) -> str:
        return intervals_link(conversation.pk, str(conversation.current_members))  # type: ignore[attr-defined]

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return False  # conversations are made over REST, by users: they need an owner

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        # A direct conversation has no title, roles or policies to change.
        return (obj is None or obj.kind == Conversation.GROUP) and super().has_change_permission(request, obj)

    def save_model(self, request, obj, form, change) -> None:  # type: ignore[no-untyped-def]
        # Through the actions, never obj.save(): they lock the row, log the event, fix badges.
        save_group_settings(obj, {name: form.cleaned_data[name] for name in form.changed_data})


@admin.register(MembershipInterval)
class MembershipIntervalAdmin(ReadOnlyAdmin):
    """Read-only rows; roles change by the actions below, through do_set_role (one owner,
    the event logged), never by editing a row."""

    list_display = ["conversation", "user", "role", tier_shown, "joined_at", "left_at", seqs_seen]
    list_filter = [StillMemberFilter, "role", TierFilter, "conversation__tenant", "conversation__kind"]
    search_fields = ["=conversation__id", "=user__username"]
    list_select_related = ["conversation", "user"]
    raw_id_fields = ["conversation", "user"]
    actions = ["make_admins", "make_members", "hand_ownership"]

    def has_set_role_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        # The rows are never edited here, but a role is a change: it takes that permission.
        return request.user.has_perm("qim.change_membershipinterval")

    @admin.action(description="Make the selected members admins of their groups", permissions=["set_role"])
    def make_admins(self, request, queryset) -> None:  # type: ignore[no-untyped-def]
        self._set_roles(request, queryset, MembershipInterval.ADMIN)

    @admin.action(description="Make the selected members plain members again", permissions=["set_role"])
    def make_members(self, request, queryset) -> None:  # type: ignore[no-untyped-def]
        self._set_roles(request, queryset, MembershipInterval.MEMBER)

    @admin.action(description="Hand ownership of the group to the selected member", permissions=["set_role"])
    def hand_ownership(self, request, queryset) -> None:  # type: ignore[no-untyped-def]
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one member to hand ownership to.", level=messages.ERROR)
            return
        self._set_roles(request, queryset, MembershipInterval.OWNER)

    def _set_roles(self, request, queryset, role: str) -> None:  # type: ignore[no-untyped-def]
        outcome = set_roles(queryset.select_related("conversation", "user").order_by("pk"), role)
        for refusal in outcome.refusals:
            self.message_user(request, refusal, level=messages.ERROR)
        self.message_user(request, f"{outcome.changed} role(s) changed to {role}.", level=messages.SUCCESS)
