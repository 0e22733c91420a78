"""`qim_bootstrap`: create a tenant and its admin (idempotent); print their token as JSON."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from qim.actions.accounts import do_bootstrap_tenant


class Command(BaseCommand):
    help = "Create (or converge) a tenant and its admin user; prints one JSON line last."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--admin", required=True, help="the admin's username")
        parser.add_argument("--password", required=True)

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        done = do_bootstrap_tenant(options["tenant"], options["admin"], options["password"])
        line = {"tenant": done.tenant.name, "user_id": done.admin.username, "token": done.token}
        self.stdout.write(json.dumps(line))
