"""What a content type means for delivery: the policy SEND and the projections obey.

`text` and the `qim.*` control types are built in; every other type is a tenant's
registered type, read through the TypeRegistry the registry app installs at start-up (the core
imports no app). SEND, rendering and the projections all ask this module, so there is one
place that decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from qim.conf import limit
from qim.errors import Refused

PERSISTENT, EPHEMERAL, EPHEMERAL_AGGREGATE = "persistent", "ephemeral", "ephemeral_aggregate"
OWN_SEQ, ANCHOR_TARGET, NONE = "own_seq", "anchor_target", "none"

TEXT = "text"
READ = "qim.read.v1"
RECALL = "qim.recall.v1"
EDIT = "qim.edit.v1"
MEMBERSHIP = "qim.membership.v1"
# Role, policy and title changes of a group (issue #34): CONTROL events like joins.
GROUP = "qim.group.v1"
CALL_RECORD = "qim.call_record.v1"
REACTION = "qim.reaction.v1"
GENERIC_PLACEHOLDER = "[message]"


@dataclass(frozen=True)
class TypePolicy:
    content_type: str
    delivery_class: str
    counts_unread: bool
    affects_session_order: bool
    timeline_visible: bool
    anchor_mode: str
    preview_template: str
    max_payload_bytes: int


def _builtin(content_type: str, **fields) -> TypePolicy:  # type: ignore[no-untyped-def]
    defaults = dict(
        delivery_class=PERSISTENT, counts_unread=True, affects_session_order=True,
        timeline_visible=True, anchor_mode=OWN_SEQ, preview_template=GENERIC_PLACEHOLDER,
    )
    defaults.update(fields)
    return TypePolicy(content_type=content_type, max_payload_bytes=0, **defaults)


BUILTIN_POLICIES = {
    TEXT: _builtin(TEXT, preview_template="{text}"),
    # Membership events are timeline rows ("alice joined") that neither count nor reorder.
    MEMBERSHIP: _builtin(
        MEMBERSHIP, counts_unread=False, affects_session_order=False,
        preview_template="[membership changed]",
    ),
    GROUP: _builtin(
        GROUP, counts_unread=False, affects_session_order=False, preview_template="[group changed]",
    ),
    # Recall and edit take their own seq (so offline members get them) but anchor on their
    # target: no timeline row, no unread, no move of the latest position (design §2).
    RECALL: _builtin(
        RECALL, counts_unread=False, affects_session_order=False, timeline_visible=False,
        anchor_mode=ANCHOR_TARGET, preview_template="[message recalled]",
    ),
    EDIT: _builtin(
        EDIT, counts_unread=False, affects_session_order=False, timeline_visible=False,
        anchor_mode=ANCHOR_TARGET, preview_template="[message edited]",
    ),
    # Lives in one user's mailbox only: never a conversation_seq.
    READ: _builtin(
        READ, counts_unread=False, affects_session_order=False, timeline_visible=False,
        anchor_mode=NONE, preview_template="",
    ),
    CALL_RECORD: _builtin(CALL_RECORD, preview_template="[call]"),
    REACTION: _builtin(
        REACTION, delivery_class=EPHEMERAL_AGGREGATE, counts_unread=False,
        affects_session_order=False, timeline_visible=False, anchor_mode=ANCHOR_TARGET,
        preview_template="",
    ),
}

class RegisteredPolicy(Protocol):
    """One tenant-registered type, as the core reads it."""

    @property
    def policy(self) -> TypePolicy: ...

    @property
    def enabled(self) -> bool: ...


class TypeSnapshot(Protocol):
    """A tenant's registered types at one moment, by content type."""

    @property
    def types(self) -> Mapping[str, RegisteredPolicy]: ...


class TypeRegistry(Protocol):
    """Where the tenants' registered types come from: the registry app's cache implements it
    and installs it with `install_type_registry` in its AppConfig.ready()."""

    async def get(self, tenant_id: int) -> TypeSnapshot: ...

    def get_sync(self, tenant_id: int) -> TypeSnapshot: ...


@dataclass(frozen=True)
class _NoTypes:
    types: Mapping[str, RegisteredPolicy]


class _BuiltinsOnly:
    """The registry before (or without) the registry app: no tenant registers anything."""

    _empty = _NoTypes({})

    async def get(self, tenant_id: int) -> TypeSnapshot:
        return self._empty

    def get_sync(self, tenant_id: int) -> TypeSnapshot:
        return self._empty


_type_registry: TypeRegistry = _BuiltinsOnly()


def install_type_registry(registry: TypeRegistry) -> None:
    """Called once at start-up by the app that keeps the tenants' registered types."""
    global _type_registry
    _type_registry = registry


def _text_policy() -> TypePolicy:
    policy = BUILTIN_POLICIES[TEXT]
    return TypePolicy(**{**policy.__dict__, "max_payload_bytes": int(limit("max_custom_payload_bytes"))})


def sendable_policy(snapshot: TypeSnapshot, content_type: str) -> TypePolicy | None:
    """What SEND may use: `text`, or an enabled registered type outside the qim. prefix
    (the built-in qim.* types are written by the server only)."""
    if content_type == TEXT:
        return _text_policy()
    registered = snapshot.types.get(content_type)
    if registered is None or not registered.enabled or content_type.startswith("qim."):
        return None
    return registered.policy


async def resolve_send_policy(tenant_id: int, content_type: str) -> TypePolicy | None:
    return sendable_policy(await _type_registry.get(tenant_id), content_type)


async def check_send_policy(tenant_id: int, content_type: str, verb: str) -> TypePolicy:
    """The policy of a type SEND and ROOM_SEND may carry: sendable, and not
    ephemeral_aggregate (those are REACT's, design §3); `unknown_custom_type` otherwise,
    naming what the frame (`verb`) wanted to do."""
    policy = await resolve_send_policy(tenant_id, content_type)
    if policy is None or policy.delivery_class == EPHEMERAL_AGGREGATE:
        raise Refused("unknown_custom_type", f"no enabled type {content_type!r} to {verb}")
    return policy


def rendering_policy(tenant_id: int, content_type: str) -> TypePolicy | None:
    """The policy a stored message renders by, enabled or not (old messages keep rendering);
    sync, for code already in a database thread."""
    if content_type == TEXT:
        return BUILTIN_POLICIES[TEXT]
    registered = _type_registry.get_sync(tenant_id).types.get(content_type)
    if registered is not None:
        return registered.policy
    return BUILTIN_POLICIES.get(content_type)


def builtin_policy(content_type: str) -> TypePolicy:
    return BUILTIN_POLICIES[content_type]
