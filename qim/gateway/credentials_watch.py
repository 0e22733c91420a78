"""What each step of a node's token re-check visits: O(changes), not O(sockets).

Database triggers bump one row, the credentials generation (qim/models/credentials.py), on
every change that can stop a token authenticating. Each step (QIM_TOKEN_RECHECK_S / SLICES)
reads that row first, then re-checks:
- every local socket, when the generation moved since the last step (or its row is missing),
  at most once per QIM_TOKEN_RECHECK_S: a deployment where logins prune old tokens moves the
  generation every few seconds, and a full pass at each step would cost ten times the sliced
  re-check it replaced. Within the period after a full pass a move starts a sliced sweep
  instead (one slice a step, so every socket within one period, as before this round);
- else only the sockets registered since the last step (so a socket whose AUTH read its token
  just before a revocation committed is re-checked by a query issued after its registration:
  if the revocation committed before that query, the query sees it; if after, it committed
  after this step's read of the generation, so a later step sees the generation move);
- and one backstop slice of RecheckSlices every BACKSTOP_EVERY steps: every socket is still
  re-checked once per BACKSTOP_EVERY x QIM_TOKEN_RECHECK_S (300 s by default), whatever
  the triggers saw (a restored dump, a trigger dropped by hand).
Token expiry (QIM_TOKEN_TTL_S) needs no query: a heap of each socket's expiry moment, taken
at each step. Before, every step re-checked a tenth of all sockets with a query: 13 % of an
idle node's samples at 18 000 sockets (docs/performance.md,
"Idle cost: the timing wheel and the kernel's TCP keepalive").
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import Any

from django.conf import settings

from qim.clock import now_ms
from qim.gateway.db import in_db_thread
from qim.node.connection import Connection
from qim.gateway.recheck_slices import SLICES, RecheckSlices
from qim.queries.credentials import credentials_generation

# One backstop slice every this many steps: each socket once per 10 periods.
BACKSTOP_EVERY = 10
UNREAD = object()


class CredentialsWatch:
    """One node's re-check state: the generation it last read, the kept slices (new sockets
    and the backstop), and the expiry heap."""

    def __init__(self) -> None:
        self.generation: Any = UNREAD
        self.slices = RecheckSlices(SLICES)
        self.steps = itertools.count()
        self.expiries: list[tuple[int, str, int]] = []  # (expires at ms, connection id, issued ms)
        self.full_at = float("-inf")  # monotonic time of the last full pass
        self.sweep_left = 0  # steps of a sliced sweep still owed since the generation moved

    async def due(self, node: Any) -> tuple[list[Connection], list[Connection]]:
        """(sockets to re-check with a query, sockets whose token expired) for this step."""
        generation = await in_db_thread(credentials_generation)()
        step = next(self.steps)
        slice_index = (step // BACKSTOP_EVERY) % SLICES
        fresh = self.slices.fresh(node, slice_index)
        self._file_expiries(fresh)
        if generation is None or generation != self.generation:
            self.sweep_left = SLICES  # every socket re-read after this move, one way or the other
        self.generation = generation
        if self.sweep_left and time.monotonic() - self.full_at >= settings.QIM_TOKEN_RECHECK_S:
            self.full_at, self.sweep_left = time.monotonic(), 0
            node.counters["credentials_full_rechecks"] += 1
            check = list(node.connections.values())
        elif self.sweep_left:
            self.sweep_left -= 1
            taken = {id(conn) for conn in fresh}
            check = fresh + [conn for conn in self.slices.due(node, step % SLICES) if id(conn) not in taken]
        elif step % BACKSTOP_EVERY == 0:
            check = self.slices.due(node, slice_index)  # the fresh ones were filed into it
        else:
            check = fresh
        return check, self._expired(node)

    def _file_expiries(self, conns: list[Connection]) -> None:
        ttl_ms = int(settings.QIM_TOKEN_TTL_S * 1000)
        if ttl_ms <= 0:
            return
        for conn in conns:
            if conn.token_digest:
                heapq.heappush(self.expiries, (conn.token_issued_ms + ttl_ms, conn.connection_id, conn.token_issued_ms))

    def _expired(self, node: Any) -> list[Connection]:
        now, expired = now_ms(), []
        while self.expiries and self.expiries[0][0] <= now:
            _, connection_id, issued_ms = heapq.heappop(self.expiries)
            conn = node.connections.get(connection_id)
            if conn is not None and conn.token_issued_ms == issued_ms:
                expired.append(conn)
        return expired
