"""Operators edit the registry here; every save goes through the same actions (and the same
validation) as the API, so it bumps the version, audits, and reaches every node."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from qim.admin.base import ReadableDatesAdmin, ReadOnlyAdmin
from qim.admin.tenants import TenantWallInline
from qim.errors import Refused
from registry.actions import InvalidType, do_create_type, do_update_type, registry_full, type_values
from registry.models import CustomMessageType, CustomMessageTypeChange
from registry.validation import TYPE_FIELDS, check_type_fields


class CustomMessageTypeForm(forms.ModelForm):
    class Meta:
        model = CustomMessageType
        fields = ["tenant", "custom_type", *TYPE_FIELDS]

    def clean(self):  # type: ignore[no-untyped-def]
        cleaned = super().clean()
        existing = type_values(CustomMessageType.objects.get(pk=self.instance.pk)) if self.instance.pk else None
        values = {**(existing or {}), **{k: v for k, v in cleaned.items() if k != "tenant"}}
        for field, message in check_type_fields(values, existing=existing).items():
            self.add_error(field if field in self.fields else None, message)
        if existing is None and cleaned.get("tenant") and (full := registry_full(cleaned["tenant"].pk)):
            self.add_error(None, full)
        return cleaned


class ChangeInline(TenantWallInline):
    model = CustomMessageTypeChange
    extra = 0
    can_delete = False
    fields = ["registry_version", "at", "actor", "action", "changes"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(CustomMessageType)
class CustomMessageTypeAdmin(ReadableDatesAdmin):
    form = CustomMessageTypeForm
    list_display = ["custom_type", "tenant", "delivery_class", "counts_unread", "timeline_visible", "enabled", "version"]
    list_filter = ["tenant", "delivery_class", "enabled"]
    search_fields = ["custom_type", "preview_template"]
    readonly_fields = ["version", "updated_at"]
    inlines = [ChangeInline]
    list_select_related = ["tenant"]

    def get_readonly_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        # Tenant and name are fixed once a type exists.
        return [*self.readonly_fields, "tenant", "custom_type"] if obj else self.readonly_fields

    def save_model(self, request, obj, form, change) -> None:  # type: ignore[no-untyped-def]
        actor = f"operator:{request.user.get_username()}"
        values = {k: form.cleaned_data[k] for k in ["custom_type", *TYPE_FIELDS] if k in form.cleaned_data}
        try:
            if change:
                saved = do_update_type(obj.tenant, obj.custom_type, values, actor)
            else:
                saved = do_create_type(form.cleaned_data["tenant"], values, actor)
        except (InvalidType, Refused) as exc:
            raise ValueError(exc.message) from exc  # the form's clean() already showed these
        obj.pk, obj.version = saved.pk, saved.version

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        # Types are disabled, never deleted: old messages must keep rendering.
        return False


@admin.register(CustomMessageTypeChange)
class CustomMessageTypeChangeAdmin(ReadOnlyAdmin):
    list_display = ["registry_version", "tenant", "message_type", "action", "actor", "at"]
    list_filter = ["tenant", "action"]
    search_fields = ["message_type__custom_type", "actor"]
    readonly_fields = ["tenant", "message_type", "registry_version", "actor", "action", "changes", "at"]
