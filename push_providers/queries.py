"""What a tenant's push is configured with, as REST and the admin show it: ids, names and
public keys, never a secret."""

from __future__ import annotations

from typing import Any

from push_providers.credentials import (
    tenant_apns,
    tenant_fcm,
    tenant_vapid,
    global_apns,
    global_fcm,
    global_vapid,
)
from push_providers.models import TenantPushConfig


def _pick(own: Any, global_: Any) -> tuple[Any, str | None]:
    if own is not None:
        return own, "tenant"
    if global_ is not None:
        return global_, "global"
    return None, None


def credentials_summary(tenant_id: int) -> dict[str, dict[str, Any]]:
    """`{apns, fcm, web}`, each with `configured` and `source` ("tenant", "global" or None)."""
    config = TenantPushConfig.objects.filter(tenant_id=tenant_id).first()
    apns, apns_source = _pick(tenant_apns(config), global_apns())
    fcm, fcm_source = _pick(tenant_fcm(config), global_fcm())
    vapid, web_source = _pick(tenant_vapid(config), global_vapid())
    return {
        "apns": {
            "configured": apns is not None,
            "key_id": apns.key_id if apns else None,
            "team_id": apns.team_id if apns else None,
            "bundle_id": apns.bundle_id if apns else None,
            "environment": apns.environment if apns else None,
            "source": apns_source,
        },
        "fcm": {
            "configured": fcm is not None,
            "project_id": fcm.project_id if fcm else None,
            "client_email": fcm.service_account.get("client_email") if fcm else None,
            "source": fcm_source,
        },
        "web": {
            "configured": vapid is not None,
            "public_key": vapid.public_key_b64url() if vapid else None,
            "subject": vapid.subject if vapid else None,
            "source": web_source,
        },
    }
