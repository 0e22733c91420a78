"""The per-connection frame budget of room pushes: at most ceil(room_outbound_frame_rate)
frames in any RATE_SLACK seconds, whichever rooms they come from (rooms/local.py).

Each connection keeps the send times of its last `cap` frames, oldest first, in a deque
bounded to `cap`: one more frame fits when fewer than `cap` were sent, or the oldest of them
left the window. That is one comparison per member in a room's tick (issue 22: the per-frame
cost), where a deque of every send time, trimmed on each check, was a loop and a call.
"""

from __future__ import annotations

import math
import time
from collections import deque

from qim.conf import limit
from qim.node.connection import Connection

# Slack so that timer and delivery jitter (up to a quarter second on a loaded 2-core machine)
# can never squeeze rate + 1 frames into one second as the client sees them.
RATE_SLACK = 1.25


class FrameBudget:
    """Send times of each connection's recent room frames."""

    def __init__(self) -> None:
        # Each connection's send times, oldest first, bounded to the cap: read in place by a
        # room's tick for its usual member (rooms/local.py `_write_tick`).
        self.windows: dict[Connection, deque[float]] = {}

    @staticmethod
    def cap() -> int:
        return math.ceil(limit("room_outbound_frame_rate"))

    def _window(self, conn: Connection, cap: int) -> deque[float]:
        sent = self.windows.get(conn)
        if sent is None or sent.maxlen != cap:
            sent = self.windows[conn] = deque(sent or (), maxlen=cap)
        return sent

    def left(self, conn: Connection, now: float | None = None) -> int:
        """Frames this connection may still get now."""
        cap = self.cap()
        horizon = (time.monotonic() if now is None else now) - RATE_SLACK
        used = 0
        for at in reversed(self._window(conn, cap)):  # newest first: stop at the first one out
            if at <= horizon:
                break
            used += 1
        return cap - used

    def take(self, conn: Connection, frames: int, cap: int, now: float) -> bool:
        """Count `frames` sent at `now` when the budget has room for all of them (a tick's
        usual member: one frame, one comparison); False, counting nothing, when not."""
        sent = self.windows.get(conn)
        if sent is None or sent.maxlen != cap:
            sent = self._window(conn, cap)
        if frames == 1:
            if len(sent) == cap and sent[0] > now - RATE_SLACK:
                return False
            sent.append(now)
            return True
        if self.left(conn, now) < frames:
            return False
        sent.extend([now] * frames)
        return True

    def count(self, conn: Connection, frames: int) -> None:
        """Count frames the caller sends now, planned with `left`."""
        if frames:
            self._window(conn, self.cap()).extend([time.monotonic()] * frames)

    def oldest(self, conn: Connection) -> float | None:
        """When the oldest frame still counted was sent (None: none)."""
        sent = self.windows.get(conn)
        if not sent:
            return None
        horizon = time.monotonic() - RATE_SLACK
        return next((at for at in sent if at > horizon), None)

    def forget(self, conn: Connection) -> None:
        self.windows.pop(conn, None)
