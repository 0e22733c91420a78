"""Typed access to the design's tunables (protocol.md §1), read from settings at call time."""

from __future__ import annotations

from django.conf import settings


def limit(name: str) -> float:
    """A tunable by its lower-case name, e.g. `limit("per_user_msg_rate")`."""
    return settings.QIM_LIMITS[name]


def all_limits() -> dict[str, int | float]:
    """Every tunable, as AUTH_OK's `limits` carries them."""
    return dict(settings.QIM_LIMITS)
