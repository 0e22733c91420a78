"""What every app's admin shares: tenant walls, read-only outboxes, and `*_ms` integers shown
as dates with date filters (one place, so every list reads the same way)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet

from qim import clock
from qim.admin.tenants import TenantWallAdmin

DAY_MS = 24 * 3600 * 1000
# Filter choice -> how far back it reaches, in ms (None: older than 30 days).
SINCE_CHOICES: list[tuple[str, str, int | None]] = [
    ("1h", "Past hour", 3600 * 1000),
    ("24h", "Past 24 hours", DAY_MS),
    ("7d", "Past 7 days", 7 * DAY_MS),
    ("30d", "Past 30 days", 30 * DAY_MS),
    ("older", "Older than 30 days", None),
]
_DISPLAYS: dict[str, Callable[[Any], str | None]] = {}


def format_ms(value: int | None) -> str | None:
    """An epoch-ms value as `2026-12-04 06:57:33.123 UTC`; None for unset (0 or null), which
    the admin shows as its empty-value dash."""
    if not value:
        return None
    moment = datetime.fromtimestamp(value / 1000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def ms_display(field: str) -> Callable[[Any], str | None]:
    """The admin column for a `*_ms` field: readable, sortable by the integer. One callable per
    field name, so the same object is recognised in `fields` and `readonly_fields`."""
    if field not in _DISPLAYS:
        def show(obj: Any) -> str | None:
            return format_ms(getattr(obj, field))

        show.__name__ = field.removesuffix("_ms")
        _DISPLAYS[field] = admin.display(description=field.removesuffix("_ms").replace("_", " "), ordering=field)(show)
    return _DISPLAYS[field]


def readable(names: Iterable[Any]) -> list[Any]:
    """`names` with every `*_ms` field name replaced by its readable column."""
    return [ms_display(n) if isinstance(n, str) and n.endswith("_ms") else n for n in names]


def ms_date_filter(field: str) -> type[admin.SimpleListFilter]:
    """A list filter on a `*_ms` field: past hour / 24 hours / 7 days / 30 days, or older."""

    class MsDateFilter(admin.SimpleListFilter):
        title = field.removesuffix("_ms").replace("_", " ")
        parameter_name = f"{field.removesuffix('_ms')}_since"

        def lookups(self, request, model_admin):  # type: ignore[no-untyped-def]
            return [(key, label) for key, label, _ in SINCE_CHOICES]

        def queryset(self, request, queryset: QuerySet) -> QuerySet:  # type: ignore[no-untyped-def]
            reach = {key: span for key, _, span in SINCE_CHOICES}
            if self.value() not in reach:
                return queryset
            span = reach[self.value()]
            if span is None:
                return queryset.filter(**{f"{field}__lt": clock.now_ms() - 30 * DAY_MS})
            return queryset.filter(**{f"{field}__gte": clock.now_ms() - span})

    MsDateFilter.__name__ = f"{field}_filter"
    return MsDateFilter


class ReadableDatesAdmin(TenantWallAdmin):
    """The base of every QIM admin: tenant walls (qim.admin.tenants), and every `*_ms` field
    shown in lists and detail pages as a UTC date; a `*_ms` name in `list_filter` becomes a
    date filter."""

    def __init__(self, model, admin_site) -> None:  # type: ignore[no-untyped-def]
        super().__init__(model, admin_site)
        self.list_display = readable(self.list_display)
        self.readonly_fields = readable(self.readonly_fields)
        self.list_filter = [
            ms_date_filter(f) if isinstance(f, str) and f.endswith("_ms") else f for f in self.list_filter
        ]

    def get_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        return readable(super().get_fields(request, obj))

    def get_fieldsets(self, request, obj=None):  # type: ignore[no-untyped-def]
        return [(name, {**opts, "fields": readable(opts["fields"])})
                for name, opts in super().get_fieldsets(request, obj)]

    def get_readonly_fields(self, request, obj=None):  # type: ignore[no-untyped-def]
        # Clock stamps are written by actions, never typed in: every `*_ms` field is read-only.
        stamps = [ms_display(f.name) for f in self.model._meta.fields if f.name.endswith("_ms")]
        shown = readable(super().get_readonly_fields(request, obj))
        return [*shown, *(s for s in stamps if s not in shown)]


class NoWrites:
    """An admin or inline whose rows only actions write: no add, change or delete here."""

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


class ReadOnlyAdmin(NoWrites, ReadableDatesAdmin):
    """Rows that only actions write (the log, audits, outboxes): operators look and count,
    never add, edit or delete them here."""

    show_full_result_count = False
