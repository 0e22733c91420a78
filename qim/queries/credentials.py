"""The credentials generation as nodes read it (qim/models/credentials.py)."""

from __future__ import annotations

from qim.models import CredentialsGeneration


def credentials_generation() -> int | None:
    """The current generation; None when its row is missing (a node then re-checks every
    socket at every step, as if it moved each time)."""
    return CredentialsGeneration.objects.filter(pk=1).values_list("generation", flat=True).first()
