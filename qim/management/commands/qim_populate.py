"""`qim_populate`: bulk users (and optionally one big group) for load tests and demos."""

from __future__ import annotations

import json
import time

from django.core.management.base import BaseCommand, CommandError

from qim.actions.accounts import do_populate_users
from qim.models import Tenant


class Command(BaseCommand):
    help = "Create users u000001... with a token each, and write the tokens to a JSON file."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--users", type=int, required=True)
        parser.add_argument("--password", default="populated")
        parser.add_argument("--device-id", default="populated")
        parser.add_argument("--group", help="title of a group conversation to create")
        parser.add_argument("--group-members", type=int, help="the first N users join it")
        parser.add_argument(
            "--group-tier", choices=["full", "mention_only"],
            help="the group's default mailbox tier (default: by size, QIM_LARGE_GROUP_MEMBERS)",
        )
        parser.add_argument("--tokens-out", required=True)

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        started = time.monotonic()
        tenant = Tenant.objects.filter(name=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}: run qim_bootstrap first")
        count = options["users"]
        if count < 1:
            raise CommandError("--users must be at least 1")
        tokens = do_populate_users(tenant, count, options["password"], options["device_id"])
        out: dict = {"users": tokens, "group": None}
        if options.get("group"):
            out["group"] = self._create_group(tenant, tokens, options)
        with open(options["tokens_out"], "w") as fh:
            json.dump(out, fh)
        elapsed = time.monotonic() - started
        self.stdout.write(json.dumps({"users": count, "group": out["group"], "seconds": round(elapsed, 2)}))

    def _create_group(self, tenant, tokens, options):  # type: ignore[no-untyped-def]
        from qim.actions.conversations import do_populate_group

        members = options.get("group_members") or len(tokens)
        usernames = list(tokens)[:members]
        return do_populate_group(tenant, options["group"], usernames, default_tier=options.get("group_tier") or "")
