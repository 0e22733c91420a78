"""`qim_export`: write one tenant's users, conversations, memberships and messages as JSON lines."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from qim.ops.export import export_tenant
from qim.management.export_files import private_file
from qim.models import Tenant


class Command(BaseCommand):
    help = (
        "Stream a tenant's users, devices, conversations, memberships and messages to --out as "
        "JSON lines (no password hashes, tokens or push credentials; the file is made mode 0600). "
        "Prints one JSON line: the counts written."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--out", required=True, help="the file to write (replaced if it exists)")

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        tenant = Tenant.objects.filter(name=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant named {options['tenant']!r}")
        with private_file(options["out"]) as out:
            counts = export_tenant(tenant, out)
        self.stdout.write(json.dumps({"tenant": tenant.name, "out": options["out"], "counts": dict(counts)}))
