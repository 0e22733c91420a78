"""REST permissions shared by every app."""

from __future__ import annotations

from rest_framework.permissions import IsAuthenticated


class Authenticated(IsAuthenticated):
    """The base of every permission that names a role: a view that replaces the default
    IsAuthenticated must not let a call without a token reach code that reads
    request.user (it is None then), so no token answers 401, never 403 or 500."""


class IsTenantAdmin(Authenticated):
    message = "tenant admins only"

    def has_permission(self, request, view) -> bool:  # type: ignore[no-untyped-def]
        return super().has_permission(request, view) and bool(request.user.is_tenant_admin)
