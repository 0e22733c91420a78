"""The call state every node sees: one record per call_id, changed only by compare-and-set.

One interface, two implementations (the centrifuge pattern, like the presence directory):
in-process for the embedded default, Redis for several nodes. Every transition is atomic in
the store, so when two nodes (or both parties) act on a call at once exactly one wins and
the others learn the state the winner left. Records expire: a call ended or abandoned
vanishes on its own (the CallRecord row keeps its call_id from being reused).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Protocol

from qim.infra.backends import make_backend, register_backend
from qim.infra.redis_client import get_redis

RINGING, ACCEPTED, ENDED = "ringing", "accepted", "ended"
COMPLETED, MISSED, REJECTED, CANCELLED, BUSY = "completed", "missed", "rejected", "cancelled", "busy"

# An active call's record (and its parties' active sets) lives this long after its last
# transition or signal: the last resort for a call whose clients vanished without a hangup
# and whose node died before it could end the call for them (rtc/departures.py).
ACTIVE_TTL_S = 3 * 3600
# An ended call's record stays this long, so late signals get `conflict`, not `not_found`.
ENDED_TTL_S = 3600


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Call:
    """One call between a caller device and a callee user, inside one conversation."""

    tenant_id: int
    call_id: str
    conversation_id: str
    caller_id: str
    caller_device_id: str
    callee_id: str
    state: str
    created_at_ms: int
    # Absolute: after it a ringing call is missed, whoever notices first (§ ring timeout).
    ring_deadline_ms: int
    # The callee device that accepted; from then on only it and the caller device take part.
    callee_device_id: str = ""
    accepted_at_ms: int = 0
    ended_at_ms: int = 0
    outcome: str = ""
    duration_s: int = 0
    # The node that runs the ring timer (the one the invite came in on).
    node_id: str = ""

    @property
    def active(self) -> bool:
        return self.state != ENDED

    def party(self, user_id: str) -> str | None:
        """"caller", "callee", or None for anyone else."""
        if user_id == self.caller_id:
            return "caller"
        if user_id == self.callee_id:
            return "callee"
        return None

    def other(self, user_id: str) -> str:
        return self.callee_id if user_id == self.caller_id else self.caller_id

    def to_fields(self) -> dict[str, str]:
        return {name: str(value) for name, value in asdict(self).items()}

    @classmethod
    def from_fields(cls, raw: dict[str, str]) -> "Call":
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in raw:
                values[f.name] = int(raw[f.name]) if f.type in ("int", int) else raw[f.name]
        return cls(**values)


class CallStore(Protocol):
    """Where calls live, shared by every node that serves their parties."""

    async def create(self, call: Call, now_ms: int) -> Call | None:
        """Store a new call: ringing, or (when the callee is in another active call, ringing
        or accepted) already ended as busy. None when the call_id exists: nothing stored."""

    async def get(self, tenant_id: int, call_id: str) -> Call | None:
        """The call as stored now, ended ones included until they expire."""

    async def transition(
        self, call: Call, to_state: str, changes: dict[str, Any], *, ringing_until_ms: int | None = None
    ) -> Call | None:
        """Move `call` from the state it has to `to_state` with `changes`, if the stored
        state is still `call.state` (and, with `ringing_until_ms`, the ring deadline is still
        after it); answers the new call, or None when someone else changed it first. Ending
        a call frees both parties (they are no longer busy)."""

    async def touch(self, call: Call) -> None:
        """A signal passed on this active call: keep it (and its parties' busy marks) alive."""

    async def active_calls(self, tenant_id: int, user_id: str) -> list[Call]:
        """The user's calls that are ringing or accepted, as caller or callee (ringing ones past
        their deadline included: they are missed, whoever has yet to notice)."""

    async def due_ringing(self, before_ms: int, limit: int) -> list[tuple[int, str]]:
        """(tenant, call_id) of ringing calls whose deadline is before `before_ms`: calls whose
        timer was lost with its node, for any node to finish."""

    async def forget_ringing(self, tenant_id: int, call_id: str) -> None:
        """Drop a call from the ringing index (its record expired or it is not ringing)."""

    async def accepted_page(self, offset: int, limit: int) -> list[tuple[int, str]]:
        """(tenant, call_id) of accepted calls, `limit` from `offset` in a stable order: for
        the sweep that ends calls whose device's node died (rtc/departures.py)."""

    async def forget_accepted(self, tenant_id: int, call_id: str) -> None:
        """Drop a call from the accepted index (its record expired)."""


def _busy_marks(calls: list[Call | None], now_ms: int) -> bool:
    """Is any of a user's calls still holding them: accepted, or ringing within its deadline?
    A ringing call past its deadline is missed already, whoever has yet to notice."""
    return any(
        c is not None and (c.state == ACCEPTED or (c.state == RINGING and c.ring_deadline_ms > now_ms))
        for c in calls
    )


class MemoryCallStore:
    """Embedded default: one process serves every connection, so a dict is the truth."""

    def __init__(self, clock: Callable[[], int] = _now_ms) -> None:
        self._clock = clock
        self._calls: dict[tuple[int, str], tuple[Call, int]] = {}
        self._active: dict[tuple[int, str], set[str]] = {}

    def _live(self, tenant_id: int, call_id: str) -> Call | None:
        entry = self._calls.get((tenant_id, call_id))
        if entry is None:
            return None
        call, expires_ms = entry
        if expires_ms <= self._clock():
            del self._calls[(tenant_id, call_id)]
            return None
        return call

    def _put(self, call: Call) -> None:
        ttl_s = ACTIVE_TTL_S if call.active else ENDED_TTL_S
        self._calls[(call.tenant_id, call.call_id)] = (call, self._clock() + ttl_s * 1000)
        for user_id in (call.caller_id, call.callee_id):
            marks = self._active.setdefault((call.tenant_id, user_id), set())
            if call.active:
                marks.add(call.call_id)
            else:
                marks.discard(call.call_id)

    async def create(self, call: Call, now_ms: int) -> Call | None:
        if self._live(call.tenant_id, call.call_id) is not None:
            return None
        marks = self._active.setdefault((call.tenant_id, call.callee_id), set())
        others = {c: self._live(call.tenant_id, c) for c in list(marks)}
        marks.difference_update(c for c, other in others.items() if other is None)
        if _busy_marks(list(others.values()), now_ms):
            call = replace(call, state=ENDED, outcome=BUSY, ended_at_ms=now_ms)
        self._put(call)
        return call

    async def get(self, tenant_id: int, call_id: str) -> Call | None:
        return self._live(tenant_id, call_id)

    async def transition(
        self, call: Call, to_state: str, changes: dict[str, Any], *, ringing_until_ms: int | None = None
    ) -> Call | None:
        stored = self._live(call.tenant_id, call.call_id)
        if stored is None or stored.state != call.state:
            return None
        if ringing_until_ms is not None and stored.ring_deadline_ms <= ringing_until_ms:
            return None
        changed = replace(stored, state=to_state, **changes)
        self._put(changed)
        return changed

    async def touch(self, call: Call) -> None:
        stored = self._live(call.tenant_id, call.call_id)
        if stored is not None and stored.active:
            self._put(stored)

    async def active_calls(self, tenant_id: int, user_id: str) -> list[Call]:
        calls = (self._live(tenant_id, c) for c in list(self._active.get((tenant_id, user_id), ())))
        return [c for c in calls if c is not None and c.active]

    async def due_ringing(self, before_ms: int, limit: int) -> list[tuple[int, str]]:
        due = [
            key for key, (call, _) in list(self._calls.items())
            if call.state == RINGING and call.ring_deadline_ms < before_ms
        ]
        return due[:limit]

    async def forget_ringing(self, tenant_id: int, call_id: str) -> None:
        return None

    async def accepted_page(self, offset: int, limit: int) -> list[tuple[int, str]]:
        accepted = sorted(key for key, (call, _) in list(self._calls.items()) if call.state == ACCEPTED)
        return accepted[offset : offset + limit]

    async def forget_accepted(self, tenant_id: int, call_id: str) -> None:
        return None


# KEYS: call, caller's active set, callee's active set, ringing index.
# ARGV: now_ms, active ttl ms, ended ttl ms, ringing member, deadline, call_id, call key
# prefix (the callee's other calls are read by it), then field/value pairs.
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local now = tonumber(ARGV[1])
local busy = false
for _, other in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local st = redis.call('HMGET', ARGV[7] .. other, 'state', 'ring_deadline_ms')
  if (not st[1]) or st[1] == 'ended' then
    redis.call('SREM', KEYS[3], other)
  elseif st[1] == 'accepted' or tonumber(st[2]) > now then
    busy = true
  end
end
redis.call('HSET', KEYS[1], unpack(ARGV, 8))
if busy then
  redis.call('HSET', KEYS[1], 'state', 'ended', 'outcome', 'busy', 'ended_at_ms', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 2
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
for i = 2, 3 do
  redis.call('SADD', KEYS[i], ARGV[6])
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[4])
return 1
"""

# KEYS: as _CREATE, then the accepted index. ARGV: from state, to state, ringing-until ms or
# '', active ttl ms, ended ttl ms, call_id, index member, then field/value pairs. Answers
# {applied, HGETALL}.
_TRANSITION = """
local st = redis.call('HMGET', KEYS[1], 'state', 'ring_deadline_ms')
if st[1] ~= ARGV[1] then return {0, redis.call('HGETALL', KEYS[1])} end
if ARGV[3] ~= '' and tonumber(st[2]) <= tonumber(ARGV[3]) then
  return {0, redis.call('HGETALL', KEYS[1])}
end
redis.call('HSET', KEYS[1], 'state', ARGV[2], unpack(ARGV, 8))
if ARGV[2] == 'ended' then
  redis.call('SREM', KEYS[2], ARGV[6])
  redis.call('SREM', KEYS[3], ARGV[6])
  redis.call('ZREM', KEYS[4], ARGV[7])
  redis.call('ZREM', KEYS[5], ARGV[7])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
else
  if ARGV[2] ~= 'ringing' then redis.call('ZREM', KEYS[4], ARGV[7]) end
  if ARGV[2] == 'accepted' then redis.call('ZADD', KEYS[5], 0, ARGV[7]) end
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
end
return {1, redis.call('HGETALL', KEYS[1])}
"""


class RedisCallStore:
    """Several nodes: a hash per call, a set of active call_ids per user (busy detection),
    one sorted set of ringing calls scored by deadline (the orphan sweep) and one of accepted
    calls (the sweep for calls whose device's node died, rtc/departures.py). Transitions are
    Lua scripts, so the check and the write are one atomic step on the server.

    The create script reads the callee's other call hashes by a key built from a prefix: fine
    on one Redis (what QIM_REDIS_URL names), not on Redis Cluster.
    """

    CALLS = "qim:rtc:call:"
    ACTIVE = "qim:rtc:active:"
    RINGING = "qim:rtc:ringing"
    ACCEPTED = "qim:rtc:accepted"

    def __init__(self, redis_factory: Callable[[], Any]) -> None:
        self._redis = redis_factory

    def _call_key(self, tenant_id: int, call_id: str) -> str:
        return f"{self.CALLS}{tenant_id}:{call_id}"

    def _keys(self, call: Call) -> list[str]:
        return [
            self._call_key(call.tenant_id, call.call_id),
            f"{self.ACTIVE}{call.tenant_id}:{call.caller_id}",
            f"{self.ACTIVE}{call.tenant_id}:{call.callee_id}",
            self.RINGING,
            self.ACCEPTED,
        ]

    @staticmethod
    def _member(tenant_id: int, call_id: str) -> str:
        return f"{tenant_id}:{call_id}"

    @staticmethod
    def _pairs(values: dict[str, Any]) -> list[str]:
        return [str(item) for pair in values.items() for item in pair]

    async def create(self, call: Call, now_ms: int) -> Call | None:
        redis = self._redis()
        created = await redis.eval(
            _CREATE, 4, *self._keys(call)[:4],
            now_ms, ACTIVE_TTL_S * 1000, ENDED_TTL_S * 1000,
            self._member(call.tenant_id, call.call_id), call.ring_deadline_ms, call.call_id,
            f"{self.CALLS}{call.tenant_id}:", *self._pairs(call.to_fields()),
        )
        if created == 0:
            return None
        if created == 2:
            return replace(call, state=ENDED, outcome=BUSY, ended_at_ms=now_ms)
        return call

    async def get(self, tenant_id: int, call_id: str) -> Call | None:
        raw = await self._redis().hgetall(self._call_key(tenant_id, call_id))
        return Call.from_fields(raw) if raw else None

    async def transition(
        self, call: Call, to_state: str, changes: dict[str, Any], *, ringing_until_ms: int | None = None
    ) -> Call | None:
        applied, flat = await self._redis().eval(
            _TRANSITION, 5, *self._keys(call),
            call.state, to_state, "" if ringing_until_ms is None else ringing_until_ms,
            ACTIVE_TTL_S * 1000, ENDED_TTL_S * 1000, call.call_id,
            self._member(call.tenant_id, call.call_id), *self._pairs(changes),
        )
        if not applied:
            return None
        return Call.from_fields(dict(zip(flat[::2], flat[1::2])))

    async def touch(self, call: Call) -> None:
        ttl_ms = ACTIVE_TTL_S * 1000
        async with self._redis().pipeline(transaction=False) as pipe:
            for key in self._keys(call)[:3]:
                pipe.pexpire(key, ttl_ms)
            await pipe.execute()

    async def active_calls(self, tenant_id: int, user_id: str) -> list[Call]:
        redis = self._redis()
        call_ids = sorted(await redis.smembers(f"{self.ACTIVE}{tenant_id}:{user_id}"))
        if not call_ids:
            return []
        async with redis.pipeline(transaction=False) as pipe:
            for call_id in call_ids:
                pipe.hgetall(self._call_key(tenant_id, call_id))
            found = await pipe.execute()
        calls = (Call.from_fields(raw) for raw in found if raw)
        return [c for c in calls if c.active]

    async def due_ringing(self, before_ms: int, limit: int) -> list[tuple[int, str]]:
        members = await self._redis().zrangebyscore(self.RINGING, "-inf", f"({before_ms}", start=0, num=limit)
        due = []
        for member in members:
            tenant, _, call_id = member.partition(":")
            due.append((int(tenant), call_id))
        return due

    async def forget_ringing(self, tenant_id: int, call_id: str) -> None:
        await self._redis().zrem(self.RINGING, self._member(tenant_id, call_id))

    async def accepted_page(self, offset: int, limit: int) -> list[tuple[int, str]]:
        members = await self._redis().zrange(self.ACCEPTED, offset, offset + limit - 1)
        return [(int(tenant), call_id) for tenant, _, call_id in (m.partition(":") for m in members)]

    async def forget_accepted(self, tenant_id: int, call_id: str) -> None:
        await self._redis().zrem(self.ACCEPTED, self._member(tenant_id, call_id))


_store: CallStore | None = None


def get_call_store() -> CallStore:
    """This process's store, of the family qim/infra/backends.py chose (Redis or in process)."""
    global _store
    if _store is None:
        _store = make_backend("calls")
    return _store


def register_call_backend() -> None:
    """The two call stores (RtcConfig.ready registers them)."""
    register_backend("calls", memory=MemoryCallStore, redis=lambda: RedisCallStore(get_redis))
