"""The collector's pause time per generation since start, for `GET /api/v1/node`.

Pass counts alone (`gc_collections`) do not say what the collector costs: a young pass over a
storm's new sockets takes milliseconds, a middle pass over what ten young passes kept can take a
hundred. Two `gc.callbacks` calls per pass, a few microseconds against passes of milliseconds.
"""

from __future__ import annotations

import gc
import time
from typing import Any

_seconds = [0.0, 0.0, 0.0]
_started = 0.0


def _timed(phase: str, info: dict[str, Any]) -> None:
    global _started
    if phase == "start":
        _started = time.perf_counter()
    else:
        _seconds[info["generation"]] += time.perf_counter() - _started


def install() -> bool:
    """Once per process (qim/asgi.py); whether it did."""
    if _timed in gc.callbacks:
        return False
    gc.callbacks.append(_timed)
    return True


def pause_ms() -> list[float]:
    """Milliseconds the collector ran per generation (young, middle, full) since install."""
    return [round(seconds * 1000, 1) for seconds in _seconds]
