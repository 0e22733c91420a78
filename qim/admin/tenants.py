"""Tenant walls in the admin: an operator in Django groups named `tenant:<name>` is scoped to
those tenants. Lists, detail pages, actions, related-object choices and the tenant filter see
only their rows; another tenant's row answers exactly like a missing one (Django's "does not
exist" page). Superusers and operators in no `tenant:` group see the whole installation."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Model, QuerySet

from qim.models import Tenant

GROUP_PREFIX = "tenant:"
# How a model reaches its tenant, tried in order when an admin names no `tenant_path`.
TENANT_ROUTES = [("tenant", "tenant"), ("user", "user__tenant"), ("conversation", "conversation__tenant"),
                 ("device", "device__user__tenant")]


def scoped_tenant_ids(request: Any) -> list[int] | None:
    """The tenant ids this operator may see; None for "all" (a superuser, or unscoped staff).
    Cached on the request: one query per page."""
    if not hasattr(request, "_qim_tenant_ids"):
        user = request.user
        names = [] if user.is_superuser else [
            group.removeprefix(GROUP_PREFIX)
            for group in user.groups.filter(name__startswith=GROUP_PREFIX).values_list("name", flat=True)
        ]
        request._qim_tenant_ids = list(Tenant.objects.filter(name__in=names).values_list("pk", flat=True)) if names else None
    return request._qim_tenant_ids


def tenant_path_of(model: type[Model]) -> str | None:
    """The lookup from `model` to its Tenant ("pk" for Tenant itself), or None (not per tenant)."""
    if model is Tenant:
        return "pk"
    names = {field.name for field in model._meta.get_fields()}
    return next((path for field, path in TENANT_ROUTES if field in names), None)


def within(queryset: QuerySet, request: Any, path: str | None) -> QuerySet:
    allowed = scoped_tenant_ids(request)
    if allowed is None or path is None:
        return queryset
    return queryset.filter(**{f"{path}__in": allowed})


class TenantWallAdmin(admin.ModelAdmin):
    """Scopes rows, related choices and the tenant filter to the operator's tenants."""

    tenant_path: str | None = None  # None: found by tenant_path_of

    def __init__(self, model, admin_site) -> None:  # type: ignore[no-untyped-def]
        super().__init__(model, admin_site)
        self.tenant_path = self.tenant_path or tenant_path_of(model)
        # Only tenants that have rows here, as this operator sees them: never another's name.
        self.list_filter = [
            (f, admin.RelatedOnlyFieldListFilter) if f in ("tenant", "conversation__tenant") else f for f in self.list_filter
        ]

    def get_queryset(self, request):  # type: ignore[no-untyped-def]
        return within(super().get_queryset(request), request, self.tenant_path)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):  # type: ignore[no-untyped-def]
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if field is not None and hasattr(field, "queryset"):
            field.queryset = within(field.queryset, request, tenant_path_of(db_field.related_model))
        return field
