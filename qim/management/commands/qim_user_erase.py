"""`qim_user_erase`: erase one user for a data-protection request (qim/actions/erasure.py)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from qim.actions.erasure import do_erase_user
from qim.management.export_files import tenant_user


class Command(BaseCommand):
    help = (
        "Erase a user: deactivate (tokens revoked, sockets closed), rename to erased-<random>, "
        "delete their devices, mailbox, cursors and push tasks, and turn every message they "
        "sent into a tombstone (state deleted, no payload). Cannot be undone: pass --yes. "
        "Prints one JSON line: the rows changed by kind."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--user", required=True, help="the user_id (username)")
        parser.add_argument("--batch", type=int, help="messages per transaction (default QIM_RETENTION_BATCH)")
        parser.add_argument("--yes", action="store_true", help="confirm: this cannot be undone")

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        user = tenant_user(options["tenant"], options["user"])
        if not options["yes"]:
            raise CommandError("erasure cannot be undone: run again with --yes")
        if options["batch"] is not None and options["batch"] < 1:
            raise CommandError("--batch must be at least 1")
        done = do_erase_user(user, batch=options["batch"])
        self.stdout.write(json.dumps({"tenant": user.tenant.name, "erased_user_id": options["user"], **done}))
