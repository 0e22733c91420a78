"""The only code that writes TenantPushConfig: set, generate or clear one provider's
credentials of a tenant. Each joins the caller's transaction, stamps updated_at_ms and, after
commit, drops this process's cached credentials of the tenant (other processes within
QIM_PUSH_CREDENTIALS_CACHE_S).

Values reach these already checked (push_providers/validation.py); nothing here logs them.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from qim.clock import now_ms
from qim.errors import Refused
from qim.models import Tenant
from push_providers.credentials import cache, new_vapid_key_pem, public_key_b64url
from push_providers.models import TenantPushConfig

# Each provider's fields of TenantPushConfig, with their cleared values.
CLEARED = {
    "apns": {"apns_key_pem": "", "apns_key_id": "", "apns_team_id": "", "apns_bundle_id": "",
             "apns_environment": TenantPushConfig.PRODUCTION},
    "fcm": {"fcm_service_account_json": ""},
    "web": {"vapid_private_key_pem": "", "vapid_subject": ""},
}


def do_save_config(config: TenantPushConfig) -> TenantPushConfig:
    """Save a tenant's config (the admin's form, the actions below): stamps updated_at_ms
    and forgets the tenant's cached credentials after commit."""
    config.updated_at_ms = max(now_ms(), config.updated_at_ms + 1)
    config.save()
    tenant_id = config.tenant_id
    transaction.on_commit(lambda: cache.forget(tenant_id))
    return config


def do_delete_configs(configs: list[TenantPushConfig]) -> None:
    """Delete tenants' configs (the admin): they fall back to the global credentials."""
    tenant_ids = [config.tenant_id for config in configs]
    TenantPushConfig.objects.filter(pk__in=[config.pk for config in configs]).delete()
    transaction.on_commit(lambda: [cache.forget(tenant_id) for tenant_id in tenant_ids])


def _update(tenant: Tenant, fields: dict[str, str]) -> TenantPushConfig:
    config, _ = TenantPushConfig.objects.select_for_update().get_or_create(tenant=tenant)
    for name, value in fields.items():
        setattr(config, name, value)
    return do_save_config(config)


def do_set_apns(tenant: Tenant, values: dict) -> None:
    """Store checked APNs values {key_pem, key_id, team_id, bundle_id, environment}."""
    _update(tenant, {f"apns_{name}": value for name, value in values.items()})


def do_set_fcm(tenant: Tenant, service_account_json: str) -> None:
    _update(tenant, {"fcm_service_account_json": service_account_json})


def do_set_vapid(tenant: Tenant, private_key_pem: str | None, subject: str) -> None:
    """Store a checked VAPID key and subject; without a key only the subject changes, and
    `bad_request` when the tenant has no key of its own to keep."""
    if private_key_pem is None:
        config = TenantPushConfig.objects.filter(tenant=tenant).first()
        if config is None or not config.vapid_private_key_pem:
            raise Refused("bad_request", "no VAPID key of this tenant: give private_key, or POST web/generate")
        _update(tenant, {"vapid_subject": subject})
        return
    _update(tenant, {"vapid_private_key_pem": private_key_pem, "vapid_subject": subject})


def do_generate_vapid(tenant: Tenant, subject: str) -> str:
    """A new VAPID key pair for the tenant (browsers subscribed with the old public key must
    subscribe again); answers the public key, base64url, for applicationServerKey."""
    private_key_pem = new_vapid_key_pem()
    _update(tenant, {"vapid_private_key_pem": private_key_pem, "vapid_subject": subject})
    return public_key_b64url(private_key_pem)


def do_clear_provider(tenant: Tenant, provider: str) -> None:
    """Forget the tenant's own credentials of one provider: it falls back to the global ones."""
    if provider not in CLEARED:
        raise Refused("not_found", f"no push provider {provider!r} (apns, fcm, web)")
    if TenantPushConfig.objects.filter(tenant=tenant).exists():
        _update(tenant, CLEARED[provider])


def default_vapid_subject() -> str:
    return settings.QIM_VAPID_SUBJECT or "mailto:admin@localhost"
