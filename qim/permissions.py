"""REST permissions shared by every app."""

from __future__ import annotations

from rest_framework.permissions import BasePermission


class IsTenantAdmin(BasePermission):
    message = "tenant admins only"

    def has_permission(self, request, view) -> bool:  # type: ignore[no-untyped-def]
        return bool(getattr(request.user, "is_tenant_admin", False))
