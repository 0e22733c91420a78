"""The operators' admin for tenants, users and devices (tokens stay out of sight)."""

from django.contrib import admin

from qim.models import Device, Tenant, User


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "registry_version", "created_at"]
    search_fields = ["name"]
    readonly_fields = ["registry_version", "created_at"]


class DeviceInline(admin.TabularInline):
    model = Device
    extra = 0
    readonly_fields = ["device_id", "created_at"]
    can_delete = True


@admin.register(User)
class UserAdmin(admin.ModelAdmin):
    list_display = ["username", "tenant", "display_name", "is_tenant_admin", "created_at"]
    list_filter = ["tenant", "is_tenant_admin"]
    search_fields = ["username", "display_name"]
    exclude = ["password_hash"]
    readonly_fields = ["created_at"]
    inlines = [DeviceInline]
    list_select_related = ["tenant"]
    show_full_result_count = False


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    list_display = ["device_id", "user", "created_at"]
    search_fields = ["device_id", "user__username"]
    list_select_related = ["user__tenant"]
    raw_id_fields = ["user"]
    show_full_result_count = False
