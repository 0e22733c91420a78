"""Per-provider counters of one worker process: sent, failed for good, retried, latency."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class ProviderStats:
    sent: int = 0
    failed: int = 0  # the provider's answer made the task fail for good
    retried: int = 0  # a transient failure; the outbox retries the task
    latency_ms_total: float = 0.0
    latency_ms_max: float = 0.0
    requests: int = 0

    def report(self) -> dict[str, float | int]:
        mean = self.latency_ms_total / self.requests if self.requests else 0.0
        return {
            "sent": self.sent,
            "failed": self.failed,
            "retried": self.retried,
            "latency_ms_mean": round(mean, 3),
            "latency_ms_max": round(self.latency_ms_max, 3),
        }


@dataclass
class ProviderCounters:
    """What ProviderSender counts, by provider name ("apns", "fcm", "web", "log")."""

    by_provider: dict[str, ProviderStats] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, provider: str, outcome: str, latency_ms: float) -> None:
        with self.lock:
            stats = self.by_provider.setdefault(provider, ProviderStats())
            setattr(stats, outcome, getattr(stats, outcome) + 1)
            stats.requests += 1
            stats.latency_ms_total += latency_ms
            stats.latency_ms_max = max(stats.latency_ms_max, latency_ms)

    def report(self) -> dict[str, dict[str, float | int]]:
        with self.lock:
            return {name: stats.report() for name, stats in sorted(self.by_provider.items())}
