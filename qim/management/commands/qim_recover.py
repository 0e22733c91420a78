"""`qim_recover`: finish interrupted recalls and edits, flush due read syncs; print a JSON tally."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from qim.ops.recovery import run_recovery_pass


class Command(BaseCommand):
    help = (
        "Complete recall/edit events whose target row was never updated (a node died between "
        "the two commits), re-issue their EVENTs, and write due read syncs. Every node runs this "
        "at start; run it by hand after an outage. Prints one JSON line {recalls, edits, read_syncs}."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument(
            "--all-read-syncs", action="store_true",
            help="also write pending read syncs whose merge window is still open",
        )

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        done = run_recovery_pass(all_read_syncs=options["all_read_syncs"])
        self.stdout.write(json.dumps(done.report()))
