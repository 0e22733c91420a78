"""`qim_retention`: apply message retention to one tenant or every tenant that has one."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from qim.models import Tenant
from qim.ops.retention import apply_retention


class Command(BaseCommand):
    help = (
        "Delete messages, mailbox entries and reactions older than each tenant's "
        "message_retention_s (0 = keep forever), QIM_RETENTION_BATCH rows per transaction. "
        "Prints one JSON line per tenant: its cut-off and the rows deleted by model."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--tenant", help="only this tenant (default: every tenant with a retention)")
        parser.add_argument("--batch", type=int, help="rows per transaction (default QIM_RETENTION_BATCH)")
        parser.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        if options["batch"] is not None and options["batch"] < 1:
            raise CommandError("--batch must be at least 1")
        if options["tenant"]:
            tenants = list(Tenant.objects.filter(name=options["tenant"]))
            if not tenants:
                raise CommandError(f"no tenant named {options['tenant']!r}")
        else:
            tenants = list(Tenant.objects.filter(message_retention_s__gt=0).order_by("name"))
        for tenant in tenants:
            report = apply_retention(tenant, batch=options["batch"], dry_run=options["dry_run"])
            self.stdout.write(json.dumps(report.as_json()))
