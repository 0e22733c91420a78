"""Operators set a tenant's own push credentials here. Secrets are write-only: their fields
never render the stored value, and a field left empty keeps it; the list and the form show
whether each provider is configured, never the key."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db import transaction

from qim.admin.base import ReadableDatesAdmin
from qim.errors import Refused
from push_providers import validation
from push_providers.actions import default_vapid_subject, do_delete_configs, do_generate_vapid, do_save_config
from push_providers.credentials import tenant_apns, tenant_fcm, tenant_vapid
from push_providers.models import TenantPushConfig

SECRET_HELP = "Write-only: never shown. Leave empty to keep the stored one."
# Form field -> (model field, check answering the value to store).
SECRETS = {
    "apns_key_pem": validation.check_apns_key,
    "fcm_service_account_json": lambda value: validation.check_service_account(validation.parse_json(value)),
    "vapid_private_key_pem": validation.check_vapid_key,
}
APNS_IDS = {"apns_key_id": "key_id", "apns_team_id": "team_id", "apns_bundle_id": "bundle_id"}


def secret_field(label: str) -> forms.CharField:
    return forms.CharField(
        label=label, required=False, strip=False, help_text=SECRET_HELP,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )


class TenantPushConfigForm(forms.ModelForm):
    apns_key_pem = secret_field("APNs .p8 key (PEM)")
    fcm_service_account_json = secret_field("FCM service account (JSON)")
    vapid_private_key_pem = secret_field("VAPID private key (PEM or base64url)")

    class Meta:
        model = TenantPushConfig
        fields = ["tenant", "apns_key_pem", "apns_key_id", "apns_team_id", "apns_bundle_id", "apns_environment",
                  "fcm_service_account_json", "vapid_private_key_pem", "vapid_subject"]

    def clean(self) -> dict:
        cleaned = super().clean()
        for name, check in SECRETS.items():
            if (cleaned.get(name) or "").strip():
                self._check(cleaned, name, check)
            else:
                cleaned[name] = getattr(self.instance, name, "")  # empty keeps the stored one
        for name, rest_name in APNS_IDS.items():
            if cleaned.get(name):
                self._check(cleaned, name, lambda value, rest_name=rest_name: validation.check_apns_id(rest_name, value))
        if cleaned.get("vapid_subject"):
            self._check(cleaned, "vapid_subject", validation.check_subject)
        return cleaned

    def _check(self, cleaned: dict, name: str, check) -> None:  # type: ignore[no-untyped-def]
        """Replace the value with what the check answers, or show its message on the field."""
        try:
            cleaned[name] = check(cleaned[name])
        except Refused as refused:
            self.add_error(name, refused.message)


@admin.display(boolean=True, description="APNs")
def apns_configured(config: TenantPushConfig) -> bool:
    return tenant_apns(config) is not None


@admin.display(boolean=True, description="FCM")
def fcm_configured(config: TenantPushConfig) -> bool:
    return tenant_fcm(config) is not None


@admin.display(boolean=True, description="Web Push")
def web_configured(config: TenantPushConfig) -> bool:
    return tenant_vapid(config) is not None


@admin.register(TenantPushConfig)
class TenantPushConfigAdmin(ReadableDatesAdmin):
    form = TenantPushConfigForm
    list_display = ["tenant", apns_configured, "apns_environment", fcm_configured, web_configured, "updated_at_ms"]
    list_filter = ["apns_environment"]
    search_fields = ["tenant__name"]
    list_select_related = ["tenant"]
    readonly_fields = [apns_configured, fcm_configured, web_configured, "updated_at_ms"]
    fieldsets = [
        (None, {"fields": ["tenant", "updated_at_ms"]}),
        ("APNs", {"fields": [apns_configured, "apns_key_pem", "apns_key_id", "apns_team_id", "apns_bundle_id",
                             "apns_environment"]}),
        ("FCM", {"fields": [fcm_configured, "fcm_service_account_json"]}),
        ("Web Push (VAPID)", {"fields": [web_configured, "vapid_private_key_pem", "vapid_subject"]}),
    ]
    actions = ["generate_vapid_key_pair"]

    def get_readonly_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        # A config belongs to its tenant for good: moving it would hand one tenant's keys to another.
        return [*self.readonly_fields, "tenant"] if obj is not None else self.readonly_fields

    def save_model(self, request, obj, form, change) -> None:  # type: ignore[no-untyped-def]
        do_save_config(obj)

    def delete_model(self, request, obj) -> None:  # type: ignore[no-untyped-def]
        do_delete_configs([obj])

    def delete_queryset(self, request, queryset) -> None:  # type: ignore[no-untyped-def]
        do_delete_configs(list(queryset))

    @admin.action(description="Generate a new VAPID key pair (browsers must subscribe again)", permissions=["change"])
    def generate_vapid_key_pair(self, request, queryset) -> None:  # type: ignore[no-untyped-def]
        for config in queryset.select_related("tenant").order_by("pk"):
            with transaction.atomic():
                public_key = do_generate_vapid(config.tenant, config.vapid_subject or default_vapid_subject())
            self.message_user(request, f"{config.tenant}: new VAPID public key {public_key}", level=messages.SUCCESS)
