"""The one place that chooses this process's backends: all in process, or all in Redis.

The centrifuge pattern (style.md): each backend is one interface with a memory and a Redis
implementation. The module that owns an interface registers its two builders here at start-up
(the core in QimConfig.ready(), each app in its own AppConfig.ready(), so the core names no
app), and `backend_family()` decides once per process which of the two every backend uses:
one process never mixes an in-process presence directory with Redis room leases.

Builders take no arguments and reach Redis only through qim/infra/redis_client.py, so reaching it
another way (Redis Sentinel) changes that module and the channel-layer config, nothing here.
Callers keep their own singletons (one per process, the rate limiter's one per event loop):
`make_backend` builds a fresh instance each time it is called.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from django.core.exceptions import ImproperlyConfigured

from qim.infra.redis_client import redis_configured

Family = Literal["memory", "redis"]
MEMORY: Family = "memory"
REDIS: Family = "redis"


@dataclass(frozen=True)
class Backend:
    """A named backend's two builders; both answer an object satisfying the same interface."""

    name: str
    # The embedded default: state in this process, enough when it holds every connection.
    memory: Callable[[], Any]
    # Several nodes: state in Redis, shared by all of them.
    redis: Callable[[], Any]


_backends: dict[str, Backend] = {}


def register_backend(name: str, *, memory: Callable[[], Any], redis: Callable[[], Any]) -> None:
    """Offer `name`'s two implementations; registering it again replaces them (ready() can
    run twice in tests)."""
    _backends[name] = Backend(name, memory, redis)


@functools.cache
def backend_family() -> Family:
    """Redis when this process is configured to reach one, in process otherwise; decided on
    first use and kept, so every backend of the process agrees."""
    return REDIS if redis_configured() else MEMORY


def make_backend(name: str) -> Any:
    """A new instance of backend `name` in this process's family."""
    backend = _backends.get(name)
    if backend is None:
        raise ImproperlyConfigured(f"no backend {name!r} is registered (is its app installed?)")
    return backend.redis() if backend_family() == REDIS else backend.memory()


def registered_backends() -> list[str]:
    """The names registered so far, for operators and tests."""
    return sorted(_backends)
