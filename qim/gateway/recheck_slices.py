"""Which local sockets each step of the token re-check visits, found without walking them all.

The re-check (qim/gateway/revocation.py) runs in SLICES steps per QIM_TOKEN_RECHECK_S, each
over a tenth of the sockets, so every socket is re-checked once per period. Choosing a slice by
hashing each connection id walked every socket at every step: 10 walks of 18 000 sockets per
period, about as much idle CPU as the re-check's queries (docs/performance.md,
"Idle cost: the timing wheel and the kernel's TCP keepalive"). Here the slices are kept lists:
a socket goes into the slice of the step that finds it (so it is re-checked at that step,
within one step of its AUTH, and then once per period), found among the newest entries of the
node's index by its `connections_opened` counter (the index is a dict, so new sockets are at
its end); a closed socket leaves its slice when its step next visits it. A step costs its slice
and the sockets opened since the last step, not every socket.
"""

from __future__ import annotations

import itertools
from typing import Any

from qim.node.connection import Connection

SLICES = 10


class RecheckSlices:
    """Slices of connection ids (looked up in the node's index at each step, so a closed
    socket drops out and a re-registered id is checked as it is now)."""

    def __init__(self, slices: int = SLICES) -> None:
        self.slices: list[list[str]] = [[] for _ in range(slices)]
        self.members: set[str] = set()
        self.opened = -1  # the node's connections_opened when last looked; -1: never

    def due(self, node: Any, index: int) -> list[Connection]:
        """The open sockets of slice `index`, after adding those opened since the last step."""
        self._take_new(node, index)
        index_of = node.connections
        kept = [i for i in self.slices[index] if i in index_of]
        if len(kept) < len(self.slices[index]):
            self.members.difference_update(set(self.slices[index]).difference(kept))
            self.slices[index] = kept
        return [index_of[i] for i in kept]

    def fresh(self, node: Any, index: int) -> list[Connection]:
        """The open sockets registered since the last look (every one at the first), filed
        into slice `index`: qim/gateway/credentials_watch.py re-checks them at once."""
        index_of = node.connections
        return [index_of[i] for i in self._take_new(node, index) if i in index_of]

    def _take_new(self, node: Any, index: int) -> list[str]:
        """The ids newly filed (all of them on a rebuild)."""
        opened = node.counters["connections_opened"]
        new = opened - self.opened
        taken: list[str] = []
        if self.opened < 0 or new < 0:
            taken = self._rebuild(node)
        elif new:
            # Every socket registered since is among the last `new` entries of the index (some
            # of those may be older ones, already in a slice: skipped).
            recent = list(itertools.islice(reversed(node.connections.keys()), new))
            target, members = self.slices[index], self.members
            for connection_id in reversed(recent):
                if connection_id not in members:
                    members.add(connection_id)
                    target.append(connection_id)
                    taken.append(connection_id)
        self.opened = opened
        return taken

    def _rebuild(self, node: Any) -> list[str]:
        """Every open socket into a slice by its position (the first step, or a reset counter)."""
        everyone = list(node.connections.keys())
        count = len(self.slices)
        self.slices = [everyone[i::count] for i in range(count)]
        self.members = set(everyone)
        return everyone
