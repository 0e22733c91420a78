"""Each node's in-memory copy of every tenant's registry, checked against the database's
registry_version at most once per second (QIM_REGISTRY_MAX_AGE_S)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from qim.content_types import TypePolicy
from qim.gateway.db import in_db_thread
from qim.models import Tenant
from registry.models import CustomMessageType


@dataclass(frozen=True)
class RegisteredType:
    policy: TypePolicy
    enabled: bool
    minimum_client_version: str
    schema_version: int
    version: int

    def wire(self) -> dict:
        """The row as REGISTRY frames and the REST API show it (protocol.md §6)."""
        p = self.policy
        return {
            "custom_type": p.content_type, "schema_version": self.schema_version,
            "delivery_class": p.delivery_class, "counts_unread": p.counts_unread,
            "affects_session_order": p.affects_session_order, "timeline_visible": p.timeline_visible,
            "anchor_mode": p.anchor_mode, "preview_template": p.preview_template,
            "max_payload_bytes": p.max_payload_bytes, "minimum_client_version": self.minimum_client_version,
            "enabled": self.enabled, "version": self.version,
        }


@dataclass(frozen=True)
class RegistrySnapshot:
    tenant_id: int
    version: int
    types: dict[str, RegisteredType]
    checked_at: float

    def changed_since(self, version: int) -> list[dict]:
        return [t.wire() for t in sorted(self.types.values(), key=lambda t: t.policy.content_type) if t.version > version]


def _registered(row: CustomMessageType) -> RegisteredType:
    policy = TypePolicy(
        content_type=row.custom_type, delivery_class=row.delivery_class, counts_unread=row.counts_unread,
        affects_session_order=row.affects_session_order, timeline_visible=row.timeline_visible,
        anchor_mode=row.anchor_mode, preview_template=row.preview_template,
        max_payload_bytes=row.max_payload_bytes,
    )
    return RegisteredType(policy, row.enabled, row.minimum_client_version, row.schema_version, row.version)


class RegistryCache:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._snapshots: dict[int, RegistrySnapshot] = {}
        self._lock = threading.Lock()

    def _fresh(self, tenant_id: int) -> RegistrySnapshot | None:
        snapshot = self._snapshots.get(tenant_id)
        if snapshot is not None and self._clock() - snapshot.checked_at < settings.QIM_REGISTRY_MAX_AGE_S:
            return snapshot
        return None

    def get_sync(self, tenant_id: int) -> RegistrySnapshot:
        """The tenant's registry; from a thread that may use the ORM."""
        snapshot = self._fresh(tenant_id)
        if snapshot is not None:
            return snapshot
        version = Tenant.objects.filter(pk=tenant_id).values_list("registry_version", flat=True).first() or 0
        cached = self._snapshots.get(tenant_id)
        if cached is not None and cached.version == version:
            snapshot = RegistrySnapshot(tenant_id, version, cached.types, self._clock())
        else:
            rows = CustomMessageType.objects.filter(tenant_id=tenant_id)
            types = {row.custom_type: _registered(row) for row in rows}
            snapshot = RegistrySnapshot(tenant_id, version, types, self._clock())
        with self._lock:
            self._snapshots[tenant_id] = snapshot
        return snapshot

    async def get(self, tenant_id: int) -> RegistrySnapshot:
        """The tenant's registry from async code: no thread hop while the copy is fresh."""
        return self._fresh(tenant_id) or await in_db_thread(self.get_sync)(tenant_id)

    def invalidate(self, tenant_id: int) -> None:
        with self._lock:
            snapshot = self._snapshots.get(tenant_id)
            if snapshot is not None:
                self._snapshots[tenant_id] = RegistrySnapshot(tenant_id, -1, snapshot.types, float("-inf"))


registry_cache = RegistryCache()
