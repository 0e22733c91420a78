"""The client's copy of its tenant's custom message type registry (protocol.md §6), kept
current, and what it decides for every message: render natively or as a placeholder (design
§3, acceptance C-6)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .codec import Frame
from .errors import QimClientError

if TYPE_CHECKING:
    from .sync import MailboxSync

logger = logging.getLogger("qimclient")

TEXT = "text"
# What the server itself shows when it has nothing better (qim.content_types).
GENERIC_PLACEHOLDER = "[message]"
NATIVE, PLACEHOLDER = "native", "placeholder"
# Why a message renders as a placeholder (`Rendered.reason`); "recalled" and "deleted" are
# the message's own `state`.
UNKNOWN_TYPE = "unknown_type"
CLIENT_TOO_OLD = "client_too_old"
MALFORMED = "malformed"
_GONE_STATES = ("recalled", "deleted")
_VERSION_RE = re.compile(r"\d+(?:\.\d+)*")

RegistryCallback = Callable[[list[str]], Awaitable[None] | None]


def parse_version(text: Any) -> tuple[int, ...] | None:
    """The first dotted number in `text`: "2.1.3" -> (2, 1, 3), "qimclient/1.2" -> (1, 2); None without one."""
    if not isinstance(text, str):
        return None
    match = _VERSION_RE.search(text)
    return tuple(int(part) for part in match.group().split(".")) if match else None


def version_satisfies(own: str, minimum: Any) -> bool:
    """Whether a client at version `own` meets a type's `minimum_client_version`.

    An empty (or absent) minimum asks nothing. Parts compare as numbers, missing parts as 0
    ("2.1" == "2.1.0" < "2.10"). A minimum that is no version, or an own version without a
    number in it, fails: a placeholder is the safe side.
    """
    if minimum is None or (isinstance(minimum, str) and not minimum.strip()):
        return True
    wanted, have = parse_version(minimum), parse_version(own)
    if wanted is None or have is None:
        return False
    width = max(len(wanted), len(have))
    return have + (0,) * (width - len(have)) >= wanted + (0,) * (width - len(wanted))


@dataclass(frozen=True)
class Rendered:
    """How the app should show one message.

    `mode` "native": the client knows the type; it draws `content_type` + `payload` its own
    way (`text` is the message text for `text`, the server's preview for other types, a
    one-line fallback). "placeholder": show `text`, the server's `preview` (or the type's
    template, or "[message]"), and nothing of the payload; `reason` says why.
    """

    mode: str
    text: str
    reason: str | None = None

    @property
    def native(self) -> bool:
        return self.mode == NATIVE

    def as_dict(self) -> dict[str, str]:
        """The `render` field the client adds to message objects and room events."""
        fields = {"mode": self.mode, "text": self.text}
        if self.reason is not None:
            fields["reason"] = self.reason
        return fields


class TypeRegistry:
    """One tenant's registry as this client last fetched it: `custom_type` -> its REGISTRY row,
    as the server sent it (fields added later ride along). Disabled types stay in it."""

    def __init__(self) -> None:
        self.version = 0
        self.loaded = False
        self.types: dict[str, dict[str, Any]] = {}

    def get(self, custom_type: str) -> dict[str, Any] | None:
        return self.types.get(custom_type)

    def __contains__(self, custom_type: object) -> bool:
        return custom_type == TEXT or custom_type in self.types

    @property
    def known_types(self) -> frozenset[str]:
        """Every content_type this client can name: `text` and the snapshot's types."""
        return frozenset(self.types) | {TEXT}

    def apply(self, frame: Frame, *, replace: bool = False) -> list[str]:
        """Merge a REGISTRY reply (the types changed since the version asked for); answers the
        custom_types it changed. `replace` starts from nothing (a `since_version` 0 fetch)."""
        if replace:
            self.types = {}
        changed = []
        rows = frame.get("types")
        for row in rows if isinstance(rows, list) else []:
            name = row.get("custom_type") if isinstance(row, dict) else None
            if not isinstance(name, str):
                continue
            held = self.types.get(name)
            if held is not None and _row_version(held) > _row_version(row):
                continue  # an older answer overtaken by a newer one
            self.types[name] = row
            changed.append(name)
        version = frame.get("registry_version")
        if isinstance(version, int) and not isinstance(version, bool):
            self.version = version if replace else max(self.version, version)
        self.loaded = True
        return changed


def _row_version(row: dict[str, Any]) -> int:
    version = row.get("version")
    return version if isinstance(version, int) and not isinstance(version, bool) else 0


def render_message(message: Any, registry: TypeRegistry, client_version: str) -> Rendered:
    """Decide how to show a message object (§5) or room event (§8); never raises.

    Native: `text` with a `{"text": str}` payload; a type in the snapshot whose
    `minimum_client_version` this client meets, disabled or not (disabling stops new sends;
    old messages keep rendering, as on the server). Placeholder: a type the snapshot lacks
    (unknown_type), one needing a newer client (client_too_old), a recalled or deleted
    message (its state), anything malformed.
    """
    if not isinstance(message, dict):
        return Rendered(PLACEHOLDER, GENERIC_PLACEHOLDER, MALFORMED)
    content_type = message.get("content_type")
    row = registry.get(content_type) if isinstance(content_type, str) else None

    def placeholder(reason: str) -> Rendered:
        return Rendered(PLACEHOLDER, _fallback_text(message, row), reason)

    if not isinstance(content_type, str):
        return placeholder(MALFORMED)
    if message.get("state") in _GONE_STATES:
        return placeholder(str(message["state"]))
    if content_type == TEXT:
        payload = message.get("payload")
        text = payload.get("text") if isinstance(payload, dict) else None
        return Rendered(NATIVE, text) if isinstance(text, str) else placeholder(MALFORMED)
    if row is None:
        return placeholder(UNKNOWN_TYPE)
    if not version_satisfies(client_version, row.get("minimum_client_version")):
        return placeholder(CLIENT_TOO_OLD)
    return Rendered(NATIVE, _fallback_text(message, row))


def _fallback_text(message: dict[str, Any], row: dict[str, Any] | None) -> str:
    """The server's preview; for room events (no preview) the type's template, filled the way
    the server fills it; else the generic placeholder."""
    preview = message.get("preview")
    if isinstance(preview, str) and preview:
        return preview
    template = row.get("preview_template") if row is not None else None
    if isinstance(template, str) and template:
        return template.replace("{sender_id}", str(message.get("sender_id", ""))).replace(
            "{content_type}", str(message.get("content_type", ""))
        )
    return GENERIC_PLACEHOLDER


class RegistrySession(Protocol):
    """What RegistrySync needs from the connection (QimClient satisfies it)."""

    async def request(self, frame_type: str, /, **fields: Any) -> Frame: ...


class RegistrySync:
    """Keeps a TypeRegistry current with `REGISTRY_GET {since_version}`.

    With `auto` on it fetches when the server announces a newer `registry_version` (AUTH_OK
    on every connect, REGISTRY_UPDATED pushes) and, lazily, when a message names a type the
    snapshot lacks (at most once per `min_interval`: a type announced on another node may
    arrive before its REGISTRY_UPDATED). Fetch failures are logged, never raised to the
    stream: messages then render from the snapshot as it is.
    """

    def __init__(
        self,
        session: RegistrySession,
        registry: TypeRegistry | None = None,
        *,
        auto: bool = True,
        min_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.session = session
        self.registry = registry if registry is not None else TypeRegistry()
        self.auto = auto
        self.min_interval = min_interval
        self.clock = clock
        # The highest registry_version the server announced; counters for tests and operators.
        self.announced = 0
        self.fetches = 0
        self._callbacks: list[RegistryCallback] = []
        self._lock = asyncio.Lock()
        self._task: asyncio.Future[None] | None = None
        self._callback_tasks: set[asyncio.Future[None]] = set()
        self._last_fetch = float("-inf")

    @property
    def stale(self) -> bool:
        """Never fetched, or the server announced a version past the snapshot's."""
        return not self.registry.loaded or self.announced > self.registry.version

    def on_change(self, callback: RegistryCallback) -> Callable[[], None]:
        """Call `callback(changed_custom_types)` after each fetch that changed something
        (e.g. to re-render placeholders); returns its remover."""
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback) if callback in self._callbacks else None

    def announce(self, version: Any) -> None:
        """A registry_version from AUTH_OK or REGISTRY_UPDATED; never blocks, never raises."""
        if isinstance(version, int) and not isinstance(version, bool):
            self.announced = max(self.announced, version)
        if self.auto and self.stale:
            self._start(self._refresh_while_stale)

    def note_types(self, content_types: Iterable[str]) -> None:
        """Types seen in messages handed on without waiting (raw pushes): fetch if one is new."""
        if self.auto and self._wants_lazy_fetch(content_types):
            self._start(self._fetch_logged)

    async def ensure_current(self, content_types: Iterable[str] = ()) -> None:
        """Before messages are handed on: wait for a fetch under way, or fetch when stale or
        when one of `content_types` is unknown; never raises."""
        if not self.auto:
            return
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait([task])  # wait, without cancelling it when we are cancelled
        due = self.stale and self.clock() - self._last_fetch >= self.min_interval
        if due or self._wants_lazy_fetch(content_types):
            await self._fetch_logged()

    async def refresh(self) -> TypeRegistry:
        """Fetch now (also with `auto` off); raises QimError, TimeoutError, ConnectionLost."""
        await self._fetch()
        return self.registry

    async def stop(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    def _wants_lazy_fetch(self, content_types: Iterable[str]) -> bool:
        if self.clock() - self._last_fetch < self.min_interval:
            return False
        return any(isinstance(t, str) and t not in self.registry for t in content_types)

    def _start(self, work: Callable[[], Awaitable[None]]) -> None:
        """One fetch task at a time; an announcement during a fetch is seen by its stale check."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(work())

    async def _refresh_while_stale(self) -> None:
        # A node's registry cache may lag its REGISTRY_UPDATED by up to a second: try again.
        for attempt in range(3):
            if attempt:
                await asyncio.sleep(self.min_interval)
            await self._fetch_logged()
            if not self.stale:
                return

    async def _fetch_logged(self) -> None:
        try:
            await self._fetch()
        except (QimClientError, TimeoutError) as error:
            logger.info("REGISTRY_GET failed (%s); rendering from registry version %d", error, self.registry.version)

    async def _fetch(self) -> None:
        async with self._lock:
            since = self.registry.version if self.registry.loaded else 0
            self._last_fetch = self.clock()
            reply = await self.session.request("REGISTRY_GET", since_version=since)
            replace = not self.registry.loaded
            version = reply.get("registry_version")
            if since and isinstance(version, int) and version < since:
                # Not the registry we hold (another server, a restored database): start over.
                reply = await self.session.request("REGISTRY_GET", since_version=0)
                replace = True
                self.announced = 0  # announcements of the other registry mean nothing here
            changed = self.registry.apply(reply, replace=replace)
            self.fetches += 1
        if changed:
            self._notify(changed)

    def _notify(self, changed: list[str]) -> None:
        for callback in list(self._callbacks):
            try:
                result = callback(changed)
                if inspect.isawaitable(result):
                    task = asyncio.ensure_future(_guard(callback, result))
                    self._callback_tasks.add(task)
                    task.add_done_callback(self._callback_tasks.discard)
            except Exception:
                logger.exception("registry callback %r failed", callback)


class RegistryAccess:
    """The registry snapshot and rendering, mixed into QimClient (which provides
    `registry_sync`, `client_version` and `mailbox`)."""

    if TYPE_CHECKING:
        registry_sync: RegistrySync
        client_version: str
        mailbox: MailboxSync | None

    @property
    def registry(self) -> TypeRegistry:
        """The registry snapshot messages render from (`types`, `version`, `loaded`)."""
        return self.registry_sync.registry

    @property
    def known_types(self) -> frozenset[str]:
        """The content types this client renders natively when its version allows: `text`
        and every type of the snapshot, disabled ones included."""
        return self.registry_sync.registry.known_types

    def render(self, message: dict[str, Any]) -> Rendered:
        """How to show a message object or room event now, from the current snapshot (the
        `render` field the client adds holds the decision made when it was handed on)."""
        return render_message(message, self.registry_sync.registry, self.client_version)

    async def refresh_registry(self) -> TypeRegistry:
        """REGISTRY_GET since the snapshot's version, now (the way to load it with
        `track_registry` off). Raises QimError, TimeoutError, ConnectionLost."""
        return await self.registry_sync.refresh()

    def on_registry_change(self, callback: RegistryCallback) -> Callable[[], None]:
        """Call `callback(changed_custom_types)` after a fetch changed the snapshot (e.g. to
        re-render placeholders); returns its remover."""
        return self.registry_sync.on_change(callback)

    async def _render_messages(self, messages: list[dict[str, Any]]) -> None:
        """Bring the snapshot up to date if needed, then add `render` to each message."""
        messages = [m for m in messages if isinstance(m, dict)]
        await self.registry_sync.ensure_current({m.get("content_type") for m in messages} - {None})  # type: ignore[arg-type]
        for message in messages:
            message["render"] = self.render(message).as_dict()

    async def _render_events(self, events: list[dict[str, Any]]) -> None:
        await self._render_messages([e["message"] for e in events if isinstance(e.get("message"), dict)])

    def _render_pushed_event(self, event: Any) -> None:
        """An EVENT push, raw: rendered from the snapshot as it is (the mailbox stream renders
        it again once the snapshot is current)."""
        message = event.get("message") if isinstance(event, dict) else None
        if isinstance(message, dict):
            message["render"] = self.render(message).as_dict()
            if self.mailbox is None:
                self.registry_sync.note_types([message.get("content_type")])  # type: ignore[list-item]


async def _guard(callback: RegistryCallback, result: Awaitable[None]) -> None:
    try:
        await result
    except Exception:
        logger.exception("registry callback %r failed", callback)
