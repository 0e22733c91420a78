"""Operators and their groups are the installation's, not a tenant's: Django's own User and
Group admins answer only to superusers and unscoped staff. A tenant-scoped operator (in a
`tenant:<name>` group, qim/admin/tenants.py) given `auth.*` permissions could otherwise add
itself to another tenant's group, or edit another operator, and so walk through the wall."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import admin as auth_admin
from django.contrib.auth.models import Group
from django.contrib.auth.models import User as Operator

from qim.admin.tenants import scoped_tenant_ids


class UnscopedOnly:
    """Every permission answers False to a tenant-scoped operator, so the section is hidden
    from its index and each of its pages answers 403."""

    def _unscoped(self, request: Any) -> bool:
        return scoped_tenant_ids(request) is None

    def has_module_permission(self, request: Any) -> bool:
        return self._unscoped(request) and super().has_module_permission(request)  # type: ignore[misc]

    def has_view_permission(self, request: Any, obj: Any = None) -> bool:
        return self._unscoped(request) and super().has_view_permission(request, obj)  # type: ignore[misc]

    def has_add_permission(self, request: Any) -> bool:
        return self._unscoped(request) and super().has_add_permission(request)  # type: ignore[misc]

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return self._unscoped(request) and super().has_change_permission(request, obj)  # type: ignore[misc]

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return self._unscoped(request) and super().has_delete_permission(request, obj)  # type: ignore[misc]


class OperatorAdmin(UnscopedOnly, auth_admin.UserAdmin):
    pass


class OperatorGroupAdmin(UnscopedOnly, auth_admin.GroupAdmin):
    pass


for model, model_admin in ((Operator, OperatorAdmin), (Group, OperatorGroupAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)
