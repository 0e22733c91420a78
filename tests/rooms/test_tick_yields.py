"""Between slices a room's tick gives other work up to TICK_YIELDS loop iterations, and
stops early only when the loop has nothing else to run (rooms/tick_pacing.py
`yield_to_others`; issue 22: an idle iteration is only a poll and the loop's own
Python).

On a real event loop: work that advances one step per iteration (a DM's frame is read,
handled, handed to a DB thread, answered: a step each) still gets every iteration; with
nothing else queued, the tick polls once and goes on.
"""

from __future__ import annotations

import asyncio

from rooms.tick_pacing import TICK_YIELDS, yield_to_others


def count_polls(loop: asyncio.AbstractEventLoop) -> list[int]:
    """How many times the loop polls for I/O from now on (one per iteration)."""
    polls = [0]
    selector = loop._selector  # type: ignore[attr-defined]
    select = selector.select

    def counted(timeout=None):  # type: ignore[no-untyped-def]
        polls[0] += 1
        return select(timeout)

    selector.select = counted
    return polls


async def test_work_that_advances_a_step_per_iteration_gets_every_yield() -> None:
    loop = asyncio.get_running_loop()
    steps: list[int] = []

    def step(n: int) -> None:
        steps.append(n)
        if n < 10:
            loop.call_soon(step, n + 1)

    loop.call_soon(step, 1)
    await yield_to_others()
    # Each of the tick's iterations ran one step of the other work (its first step ran in
    # the first iteration, before or after the tick's own).
    assert TICK_YIELDS <= len(steps) <= TICK_YIELDS + 1
    assert steps == list(range(1, len(steps) + 1))


async def test_with_nothing_else_to_run_the_tick_polls_once() -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(0)  # whatever the test's set-up left queued runs first
    polls = count_polls(loop)
    await yield_to_others()
    assert polls[0] == 1
