"""The credentials generation: one row that database triggers bump on every change that can
stop a token authenticating, so nodes re-check their sockets' tokens only when it moved."""

from __future__ import annotations

from django.db import models


class CredentialsGeneration(models.Model):
    """The single row (pk 1). Bumped by triggers (migration 0009), not by code: a token row
    deleted or updated, a user's `is_active` or tenant changed, a device moved to another user
    or renamed, or any of those rows deleted, whether by the admin, REST, a queryset's
    `delete()`/`update()` or raw SQL. Nodes poll it (qim/gateway/credentials_watch.py)."""

    generation = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"credentials generation {self.generation}"
