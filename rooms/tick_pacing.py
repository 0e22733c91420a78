"""How a room's tick shares the event loop (rooms/local.py): the slice it writes for, the
loop iterations it gives away after each, how long it waits for conversation frames, and the
least gap after a long tick."""

from __future__ import annotations

import asyncio

# How long a room's tick writes to sockets before it lets the loop run other work (a direct
# write is one send() of 20-60 us on loopback: a 500-member tick takes about 10 ms,
# docs/performance.md, "Encode-once fan-out and direct socket writes").
TICK_SLICE_S = 0.001
# How many loop iterations a tick gives away after each slice. Other work advances one step
# per iteration (a DM's frame is read, handled, handed to a DB thread, answered, pushed: a
# step each), so with one iteration a DM that met a tick took a slice per step, up to the
# whole tick. An iteration with nothing else to run is only a poll and the loop's own
# Python, paid four times a millisecond by a big room's tick: yield_to_others stops at the
# first (docs/performance.md, "Encode-once fan-out and direct socket writes").
TICK_YIELDS = 4
# The most a tick waits, in all, for conversation frames being handled (DMs, reads, reacts)
# before its next slice (qim/node/foreground.py): long enough for a SEND's DB call at its
# slowest on a loaded node, short enough that a steady stream of them slows a room's ticks
# by at most this much each.
TICK_GIVE_WAY_S = 0.02
# The least wait after a tick longer than the interval, in intervals. It was half: the tick
# that wrote every member in one go (2026-12-02) read nothing between ticks, and with no wait
# ticks of one event each followed one another (docs/performance.md, "Merged per-node batches").
# A tick now yields after every slice, and a rolling tick (TickPlan) takes the events that
# arrive while it runs to the members it has not reached yet, so a 5 000-member room's cycle
# is its tick plus this.
TICK_GAP = 0.125


async def yield_to_others() -> None:
    """Up to TICK_YIELDS loop iterations for other work, fewer when the loop has nothing
    else to run: after an iteration whose poll found no I/O and that queued no callback
    besides this tick's, more iterations would only poll again. asyncio's ready queue is
    private; a loop without one gets every yield."""
    ready = getattr(asyncio.get_running_loop(), "_ready", None)
    for _ in range(TICK_YIELDS):
        await asyncio.sleep(0)
        if ready is not None and not ready:
            return
