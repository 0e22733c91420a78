"""The only writers of the registry: every change bumps the tenant's registry_version, leaves
an audit row, and is announced to every node after commit."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.forms.models import model_to_dict

from qim.errors import Refused
from qim.models import Tenant
from registry.builtins import builtin_rows
from registry.hot_reload import announce_on_commit
from registry.models import CustomMessageType, CustomMessageTypeChange
from registry.validation import TYPE_FIELDS, check_type_fields


class InvalidType(Refused):
    """A registry write that breaks a rule; `errors` maps field -> message."""

    def __init__(self, errors: dict[str, str]) -> None:
        field, message = next(iter(errors.items()))
        super().__init__("bad_request", f"{field}: {message}")
        self.errors = errors


def type_values(row: CustomMessageType) -> dict[str, Any]:
    values = model_to_dict(row, fields=["custom_type", *TYPE_FIELDS])
    return values


def _bump(tenant_id: int) -> int:
    """Take the tenant's row lock and the next registry_version (joins the transaction)."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant_id)
    tenant.registry_version += 1
    tenant.save(update_fields=["registry_version"])
    return tenant.registry_version


def _record(row: CustomMessageType, version: int, actor: str, action: str, changes: dict) -> None:
    CustomMessageTypeChange.objects.create(
        tenant_id=row.tenant_id, message_type=row, registry_version=version,
        actor=actor, action=action, changes=changes,
    )
    announce_on_commit(row.tenant_id, version)


def do_create_type(tenant: Tenant, values: dict[str, Any], actor: str, *, builtin: bool = False) -> CustomMessageType:
    """Register a new type (enabled). Raises InvalidType, or Refused("conflict") if it exists."""
    row = CustomMessageType(tenant=tenant, **{k: v for k, v in values.items() if k in ["custom_type", *TYPE_FIELDS]})
    errors = check_type_fields(type_values(row), existing=None, creating_builtin=builtin)
    if errors:
        raise InvalidType(errors)
    with transaction.atomic():
        if CustomMessageType.objects.filter(tenant=tenant, custom_type=row.custom_type).exists():
            raise Refused("conflict", f"{row.custom_type} is already registered")
        row.version = _bump(tenant.pk)  # the tenant's row lock: creations count one at a time
        if not builtin and (full := registry_full(tenant.pk)):
            raise Refused("conflict", full)
        row.save()
        _record(row, row.version, actor, "create", type_values(row))
    return row


def registry_full(tenant_id: int) -> str:
    """Why the tenant may not register another type, or "" while it may: a REGISTRY reply
    carries every type in one frame, so their number is bounded."""
    most = settings.QIM_MAX_CUSTOM_TYPES_PER_TENANT
    if CustomMessageType.objects.filter(tenant_id=tenant_id).count() < most:
        return ""
    return f"the registry holds {most} types, the most a tenant may have (disabled ones count)"


def do_update_type(tenant: Tenant, custom_type: str, changes: dict[str, Any], actor: str) -> CustomMessageType:
    """Change some fields of a type (PUT and PATCH both come here with the fields they carry)."""
    with transaction.atomic():
        row = access_type_for_update(tenant, custom_type)
        before = type_values(row)
        for field, value in changes.items():
            if field in TYPE_FIELDS or field == "custom_type":
                setattr(row, field, value)
        after = type_values(row)
        errors = check_type_fields(after, existing=before)
        if errors:
            raise InvalidType(errors)
        diff = {f: [before[f], after[f]] for f in after if before[f] != after[f]}
        if not diff:
            return row
        row.version = _bump(tenant.pk)
        row.save()
        _record(row, row.version, actor, "update", diff)
    return row


def do_disable_type(tenant: Tenant, custom_type: str, actor: str) -> CustomMessageType:
    """DELETE: the type stops being sendable; old messages keep rendering from its row."""
    return do_update_type(tenant, custom_type, {"enabled": False}, actor)


def access_type_for_update(tenant: Tenant, custom_type: str) -> CustomMessageType:
    row = CustomMessageType.objects.select_for_update().filter(tenant=tenant, custom_type=custom_type).first()
    if row is None:
        raise Refused("not_found", f"no type {custom_type!r}")
    return row


def do_install_builtins(tenant: Tenant) -> int:
    """Create the qim.* rows the tenant lacks (qim_bootstrap); answers how many were made."""
    existing = set(
        CustomMessageType.objects.filter(tenant=tenant, custom_type__startswith="qim.").values_list("custom_type", flat=True)
    )
    made = 0
    for name, values in builtin_rows().items():
        if name not in existing:
            do_create_type(tenant, {"custom_type": name, **values}, "qim_bootstrap", builtin=True)
            made += 1
    return made
