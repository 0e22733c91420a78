"""Tenant walls in the admin, enforced whatever Django permissions an operator holds.

An operator in Django groups named `tenant:<name>` is scoped to those tenants. Superusers and
staff in no `tenant:` group see the whole installation.

Every ModelAdmin of every app is a `TenantWallAdmin` (or an installation-only admin that
refuses scoped operators: qim/admin/operators.py), and every inline a `TenantWall`;
tests/walls/test_admin_every_model.py fails on one that is not. For a scoped operator:

* lists, detail, history and delete pages, changelist actions and search see only rows of
  their tenants (`get_queryset`): another tenant's id answers exactly like a missing one
  (Django's "does not exist" redirect);
* autocomplete answers from the walled `get_queryset` of the related model's admin;
* foreign-key and many-to-many choices of every form and inline list only their tenants'
  rows, so a form pointing a row at another tenant's tenant, user or conversation is refused
  on save ("Select a valid choice");
* list filters on a relation offer only the related rows that the walled list holds;
* view, change and delete permissions answer False for a row outside the wall, so a delete
  whose cascade would reach another tenant's rows (of a model in the admin) lists their
  kind only, not the rows, and is refused.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import get_fields_from_path
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
    """`queryset` cut to the operator's tenants; nothing at all, for a scoped operator, of a
    model with no route to a tenant."""
    allowed = scoped_tenant_ids(request)
    if allowed is None:
        return queryset
    if path is None:
        return queryset.none()
    return queryset.filter(**{f"{path}__in": allowed})


def tenant_id_of(obj: Model, path: str | None) -> int | None:
    """The id of the tenant `obj` belongs to, following `path` ("user__tenant": obj.user.tenant_id)."""
    if path is None:
        return None
    *hops, last = path.split("__")
    for hop in hops:
        obj = getattr(obj, hop)
    return obj.pk if last == "pk" else getattr(obj, f"{last}_id")


def scoped_choices(field: Any, request: Any) -> Any:
    """A foreign-key or many-to-many form field offering (and accepting) only rows inside the wall."""
    if field is not None and getattr(field, "queryset", None) is not None:
        field.queryset = within(field.queryset, request, tenant_path_of(field.queryset.model))
    return field


class TenantWall:
    """Rows and related choices cut to the operator's tenants: for ModelAdmins and inlines."""

    tenant_path: str | None = None  # None: found by tenant_path_of

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant_path = self.tenant_path or tenant_path_of(self.model)  # type: ignore[attr-defined]

    def get_queryset(self, request: Any) -> QuerySet:
        return within(super().get_queryset(request), request, self.tenant_path)  # type: ignore[misc]

    def formfield_for_foreignkey(self, db_field, request, **kwargs):  # type: ignore[no-untyped-def]
        return scoped_choices(super().formfield_for_foreignkey(db_field, request, **kwargs), request)  # type: ignore[misc]

    def formfield_for_manytomany(self, db_field, request, **kwargs):  # type: ignore[no-untyped-def]
        return scoped_choices(super().formfield_for_manytomany(db_field, request, **kwargs), request)  # type: ignore[misc]


def related_only(model: type[Model], spec: Any) -> Any:
    """A list filter naming a relation ("tenant", "conversation__tenant") offers only the
    related rows present in the (walled) list: never another tenant's name."""
    if isinstance(spec, str) and get_fields_from_path(model, spec)[-1].is_relation:
        return (spec, admin.RelatedOnlyFieldListFilter)
    return spec


class TenantWallAdmin(TenantWall, admin.ModelAdmin):
    """The base of every QIM ModelAdmin (through qim.admin.base.ReadableDatesAdmin)."""

    def __init__(self, model, admin_site) -> None:  # type: ignore[no-untyped-def]
        super().__init__(model, admin_site)
        self.list_filter = [related_only(model, spec) for spec in self.list_filter]

    def inside(self, request: Any, obj: Model | None) -> bool:
        allowed = scoped_tenant_ids(request)
        return obj is None or allowed is None or tenant_id_of(obj, self.tenant_path) in allowed

    def has_view_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return self.inside(request, obj) and super().has_view_permission(request, obj)

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return self.inside(request, obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return self.inside(request, obj) and super().has_delete_permission(request, obj)


class TenantWallInline(TenantWall, admin.TabularInline):
    """The base of every inline: its rows and its related choices, walled."""
