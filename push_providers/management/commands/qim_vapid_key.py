"""`qim_vapid_key --out FILE`: the global VAPID key for `make run`, generated once and kept."""

from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from push_providers.credentials import new_vapid_key_pem, public_key_b64url, vapid_key_pem


class Command(BaseCommand):
    help = (
        "Write a new P-256 VAPID private key (PEM, mode 0600) to --out unless that file already "
        "holds one; prints the public key (base64url, the browsers' applicationServerKey)."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--out", required=True, help="the PEM file to create or keep")

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        out = Path(options["out"])
        if out.exists():
            try:
                pem = vapid_key_pem(out.read_text())
            except ValueError:
                raise CommandError(f"{out} exists but is not a P-256 private key; move it away") from None
        else:
            pem = new_vapid_key_pem()
            out.parent.mkdir(parents=True, exist_ok=True)
            # Created 0600 from the start: the key never sits world-readable, not even briefly.
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as file:
                file.write(pem)
        self.stdout.write(public_key_b64url(pem))
