"""Who a token speaks for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qim.models import DeviceToken


@dataclass(frozen=True)
class Identity:
    """Who a token speaks for, resolved once at AUTH and kept for the connection's life."""

    tenant_id: int
    tenant_name: str
    user_pk: int
    user_id: str
    device_id: str
    is_tenant_admin: bool
    registry_version: int
    user: Any


def identity_for_token(key: str, device_id: str | None) -> Identity | None:
    """The identity of `key`, or None when it is unknown or (if given) bound to another device."""
    token = (
        DeviceToken.objects.select_related("device__user__tenant").filter(key=key).first()
    )
    if token is None:
        return None
    device = token.device
    if device_id is not None and device.device_id != device_id:
        return None
    user = device.user
    return Identity(
        tenant_id=user.tenant_id,
        tenant_name=user.tenant.name,
        user_pk=user.pk,
        user_id=user.username,
        device_id=device.device_id,
        is_tenant_admin=user.is_tenant_admin,
        registry_version=user.tenant.registry_version,
        user=user,
    )
