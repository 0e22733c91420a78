"""The operators' admin: tenants, users and devices (tokens stay out of sight), the commit log
with its moderation action, the moderation audit, the push outbox with its retry action, and
the contract models of protocol.md §2 (mailbox, badges) read-only. Conversations and their
membership intervals, roles and tiers: qim/admin/conversations.py."""

from django.contrib import admin, messages

from qim.admin import conversations  # noqa: F401  (registers Conversation, MembershipInterval)
from qim.admin import operators  # noqa: F401  (Django's User and Group admins: unscoped operators only)
from qim.actions.credentials import do_activate_user, do_deactivate_user
from qim.actions.push import do_retry_tasks
from qim.admin.base import NoWrites, ReadableDatesAdmin, ReadOnlyAdmin
from qim.admin.tenants import TenantWallInline, scoped_tenant_ids
from qim.clock import now_ms
from qim.errors import Refused
from qim.models import (
    Device,
    MessageMention,
    MessageRecord,
    ModerationAudit,
    PushTask,
    Tenant,
    User,
    UserBadgeState,
    UserMailboxEntry,
)
from qim.moderation import ModerationService, Moderator


@admin.register(Tenant)
class TenantAdmin(ReadableDatesAdmin):
    # Newest first, as a changelist without one shows; the autocomplete pages need an order too.
    ordering = ("-pk",)
    list_display = ["name", "registry_version", "message_retention_s", "created_at"]
    search_fields = ["name"]
    readonly_fields = ["registry_version", "created_at"]

    def has_add_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        # An operator scoped to some tenants could not see a tenant they made: only unscoped ones.
        return scoped_tenant_ids(request) is None and super().has_add_permission(request)


@admin.display(boolean=True, description="push credentials")
def has_push_credentials(device: Device) -> bool:
    return bool(device.push_token or device.voip_token)


# Push and VoIP tokens let whoever holds them (with the provider's credentials) reach the
# device: secrets, never shown. Operators see that a device has them; clients set and clear
# them over REST (POST/DELETE devices/{id}/push).
DEVICE_FIELDS = ["device_id", "push_platform", has_push_credentials, "created_at"]


class DeviceInline(TenantWallInline):
    model = Device
    extra = 0
    fields = DEVICE_FIELDS
    readonly_fields = DEVICE_FIELDS
    can_delete = True


@admin.register(User)
class UserAdmin(ReadableDatesAdmin):
    # Newest first, as a changelist without one shows; the autocomplete pages need an order too.
    ordering = ("-pk",)
    list_display = ["username", "tenant", "display_name", "is_tenant_admin", "is_active", "created_at"]
    list_filter = ["tenant", "is_tenant_admin", "is_active", "created_at"]
    search_fields = ["username", "display_name"]
    exclude = ["password_hash"]
    # Changed through the actions only: deactivating must also revoke tokens and close sockets.
    readonly_fields = ["is_active", "created_at"]
    inlines = [DeviceInline]
    list_select_related = ["tenant"]
    show_full_result_count = False
    actions = ["deactivate_selected", "activate_selected"]

    @admin.action(description="Deactivate selected users (revoke their tokens, close their sockets)", permissions=["change"])
    def deactivate_selected(self, request, queryset) -> None:  # type: ignore[no-untyped-def]
        revoked = sum(do_deactivate_user(user) for user in queryset.order_by("pk"))
        self.message_user(request, f"{queryset.count()} user(s) deactivated, {revoked} token(s) revoked.", level=messages.SUCCESS)

    @admin.action(description="Reactivate selected users (they log in again)", permissions=["change"])
    def activate_selected(self, request, queryset) -> None:  # type: ignore[no-untyped-def]
        for user in queryset.order_by("pk"):
            do_activate_user(user)
        self.message_user(request, f"{queryset.count()} user(s) reactivated.", level=messages.SUCCESS)


@admin.register(Device)
class DeviceAdmin(ReadableDatesAdmin):
    # Newest first, as a changelist without one shows; the autocomplete pages need an order too.
    ordering = ("-pk",)
    list_display = ["device_id", "user", "push_platform", has_push_credentials, "created_at"]
    fields = ["user", *DEVICE_FIELDS]
    readonly_fields = DEVICE_FIELDS
    search_fields = ["device_id", "user__username"]
    list_select_related = ["user__tenant"]
    raw_id_fields = ["user"]
    show_full_result_count = False


class MentionInline(NoWrites, TenantWallInline):
    """Whom a message mentions, as mention_count counts it (one row per user; at most
    max_mentions_per_message), read-only: an EDIT rewrites them, nothing else does."""

    model = MessageMention
    fk_name = "message"
    extra = 0
    fields = ["user"]
    readonly_fields = ["user"]
    verbose_name_plural = "mentions (what mention_count counts)"

    def get_queryset(self, request):  # type: ignore[no-untyped-def]
        return super().get_queryset(request).select_related("user__tenant")


@admin.register(MessageRecord)
class MessageRecordAdmin(ReadOnlyAdmin):
    """The commit log, read-only, with the mention rows of a message; operators moderate
    through the recall action."""
    # Newest first, as a changelist without one shows; the autocomplete pages need an order too.
    ordering = ("-pk",)

    list_display = ["conversation_id", "conversation_seq", "kind", "content_type", "sender", "state", "sent_at_ms"]
    list_filter = ["kind", "state", "tenant", "sent_at_ms"]
    # Exact matches only: the log is the biggest table, and these hit its indexes.
    search_fields = ["=message_id", "=conversation__id", "=sender__username"]
    list_select_related = ["sender__tenant"]
    actions = ["recall_selected"]
    inlines = [MentionInline]

    def has_recall_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        # The log is never edited here, but moderating it is a change: it takes that permission.
        return request.user.has_perm("qim.change_messagerecord")

    @admin.action(description="Recall selected messages (moderation, no time window)", permissions=["recall"])
    def recall_selected(self, request, queryset) -> None:  # type: ignore[no-untyped-def]
        service = ModerationService()
        done = 0
        for record in queryset.filter(kind=MessageRecord.MESSAGE).order_by("pk"):
            try:
                moderator = Moderator.operator(record.tenant_id, request.user.get_username())
                service.recall(moderator, record.conversation_id, record.conversation_seq, reason="admin site")
                done += 1
            except Refused as refused:
                self.message_user(request, f"{record}: {refused.message}", level=messages.ERROR)
        self.message_user(request, f"{done} message(s) recalled.", level=messages.SUCCESS)


@admin.register(ModerationAudit)
class ModerationAuditAdmin(ReadOnlyAdmin):
    """Every moderation act; written by qim.moderation only, never edited here."""

    list_display = ["at_ms", "tenant", "actor", "action", "outcome", "conversation_id", "conversation_seq", "reason"]
    list_filter = ["tenant", "action", "outcome", "at_ms"]
    search_fields = ["actor", "conversation_id", "message_id"]


@admin.register(UserMailboxEntry)
class UserMailboxEntryAdmin(ReadOnlyAdmin):
    list_display = ["user", "mailbox_seq", "kind", "conversation", "message", "origin_device_id", "created_at_ms"]
    list_filter = ["tenant", "kind", "created_at_ms"]
    search_fields = ["user__username", "conversation__id"]
    list_select_related = ["user__tenant"]
    raw_id_fields = ["user", "conversation", "message"]


@admin.display(description="last error")
def last_error_start(task: PushTask) -> str:
    """The list shows the start; the task's page shows all of it (up to 2 000 characters)."""
    return task.last_error if len(task.last_error) <= 80 else task.last_error[:80] + "…"


class PushStateFilter(admin.SimpleListFilter):
    """All three states always offered (not only those present), so "failed" is one click."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):  # type: ignore[no-untyped-def]
        return [(state, state) for state in (PushTask.PENDING, PushTask.SENT, PushTask.FAILED)]

    def queryset(self, request, queryset):  # type: ignore[no-untyped-def]
        return queryset.filter(state=self.value()) if self.value() else queryset


@admin.register(PushTask)
class PushTaskAdmin(ReadOnlyAdmin):
    """The outbox, read-only but for "retry" (qim.actions.push.do_retry_tasks says what it
    does to each state). The payload is shown: it is what the provider is sent, no secret."""

    list_display = ["id", "user", "device", "kind", "state", "attempts", "created_at_ms", "available_at_ms",
                    "sent_at_ms", last_error_start]
    list_filter = [PushStateFilter, "tenant", "kind", "created_at_ms", "available_at_ms"]
    search_fields = ["user__username", "device__device_id", "last_error"]
    list_select_related = ["user__tenant", "device"]
    raw_id_fields = ["user", "device"]
    actions = ["retry_selected"]

    def has_retry_permission(self, request) -> bool:  # type: ignore[no-untyped-def]
        return request.user.has_perm("qim.change_pushtask")

    @admin.action(description="Retry selected push tasks (failed: back to pending; pending: due now)",
                  permissions=["retry"])
    def retry_selected(self, request, queryset) -> None:  # type: ignore[no-untyped-def]
        counts = do_retry_tasks(list(queryset.values_list("id", flat=True)), now_ms())
        self.message_user(
            request,
            f"{counts['requeued']} failed task(s) back to pending, {counts['hurried']} pending task(s) due now, "
            f"{counts['skipped']} left as they were (sent, being sent, or already due).",
            level=messages.SUCCESS,
        )


@admin.register(UserBadgeState)
class UserBadgeStateAdmin(ReadOnlyAdmin):
    list_display = ["user", "badge", "updated_at_ms"]
    search_fields = ["user__username"]
    list_select_related = ["user__tenant"]
    raw_id_fields = ["user"]
