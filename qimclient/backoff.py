"""Reconnect delays: exponential, capped, jittered so a fleet does not reconnect in lockstep."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delay before attempt n: `min(maximum, initial * factor**n)`, minus up to `jitter` of it."""

    initial: float = 0.2
    maximum: float = 10.0
    factor: float = 2.0
    jitter: float = 0.5
    random: Callable[[], float] = field(default=random.random, repr=False)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt `attempt` (0-based); the exponent is clamped against overflow."""
        ceiling = min(self.maximum, self.initial * self.factor ** min(attempt, 64))
        return ceiling * (1.0 - self.jitter * self.random())
