"""`qim_user_export`: one user's data as JSON lines, for a data-protection request."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from qim.ops.export import export_user
from qim.management.export_files import private_file, tenant_user


class Command(BaseCommand):
    help = (
        "Write one user's account, devices, memberships (with their conversations), read "
        "positions and sent messages to --out as JSON lines (no secrets; mode 0600). "
        "Prints one JSON line: the counts written."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--user", required=True, help="the user_id (username)")
        parser.add_argument("--out", required=True, help="the file to write (replaced if it exists)")

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        user = tenant_user(options["tenant"], options["user"])
        with private_file(options["out"]) as out:
            counts = export_user(user, out)
        self.stdout.write(json.dumps({"tenant": user.tenant.name, "user_id": user.username, "counts": dict(counts)}))
