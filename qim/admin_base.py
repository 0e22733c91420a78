"""What every app's admin shares."""

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows that only actions write (the log, audits, outboxes): operators look and count,
    never add, edit or delete them here."""

    show_full_result_count = False

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False
