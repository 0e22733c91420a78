"""A registry change made through the API on node 1 is enforced by node 2 within 1 s."""

from __future__ import annotations

import time

from qimclient import QimError
from tests.conftest import QimDeployment
from tests.core.conversation_helpers import create_group
from tests.harness.personas import TenantHandle, api_ok


async def test_a_change_on_node_1_is_enforced_on_node_2_within_a_second(
    cluster: QimDeployment, cluster_acme: TenantHandle
) -> None:
    n1, n2 = cluster.nodes
    alice = cluster_acme.persona("alice")
    group = create_group(alice, cluster_acme.persona("bob"))
    on_n2 = await alice.connect(n2)
    name = f"acme.hot{time.time_ns()}.v1"

    async def try_send() -> str:
        try:
            await on_n2.request("SEND", conversation_id=group, client_msg_id=f"{name}-{time.monotonic_ns()}",
                                content_type=name, payload={"n": 1})
            return "accepted"
        except QimError as refused:
            return refused.code

    assert await try_send() == "unknown_custom_type"  # node 2 has cached "no such type"
    created_at = time.monotonic()
    api_ok(n1, "POST", "registry/types", cluster_acme.admin_token,
           json={"custom_type": name, "preview_template": "[hot]", "max_payload_bytes": 64})
    while (outcome := await try_send()) != "accepted" and time.monotonic() - created_at < 3:
        pass
    enabled_after = time.monotonic() - created_at
    update = await on_n2.next_push(timeout=2, type="REGISTRY_UPDATED")
    assert update["registry_version"] >= 1

    disabled_at = time.monotonic()
    api_ok(n1, "DELETE", f"registry/types/{name}", cluster_acme.admin_token)
    while (refusal := await try_send()) == "accepted" and time.monotonic() - disabled_at < 3:
        pass
    disabled_after = time.monotonic() - disabled_at
    print(f"\nregistry hot reload across nodes: enabled after {enabled_after * 1000:.0f} ms, "
          f"disabled after {disabled_after * 1000:.0f} ms")
    assert outcome == "accepted" and enabled_after < 1.0
    assert refusal == "unknown_custom_type" and disabled_after < 1.0
