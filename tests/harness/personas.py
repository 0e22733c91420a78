"""Tenants and named personas (alice, bob, carol...) made over the real REST API."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import httpx

from qimclient import QimClient
from tests.harness.qim_process import QimNode

_serial = itertools.count(1)
PASSWORD = "correct horse"


class ApiFailure(AssertionError):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"{response.request.method} {response.request.url} -> {response.status_code}: {response.text}")
        self.response = response


def api(node: QimNode, method: str, path: str, token: str | None = None, **kwargs: Any) -> httpx.Response:
    headers = dict(kwargs.pop("headers", {}))
    if token:
        headers["Authorization"] = f"Token {token}"
    return httpx.request(method, f"{node.http_url}/api/v1/{path}", headers=headers, timeout=30, **kwargs)


def api_ok(node: QimNode, method: str, path: str, token: str | None = None, **kwargs: Any) -> Any:
    response = api(node, method, path, token, **kwargs)
    if response.status_code >= 300:
        raise ApiFailure(response)
    return response.json() if response.content else None


@dataclass
class Persona:
    """A user of a tenant with as many devices as a test asks for."""

    tenant: "TenantHandle"
    user_id: str
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, device_id: str = "phone", node: QimNode | None = None) -> str:
        if device_id not in self.tokens:
            answer = api_ok(
                node or self.tenant.node,
                "POST",
                "auth/token",
                json={
                    "tenant": self.tenant.name,
                    "username": self.user_id,
                    "password": PASSWORD,
                    "device_id": device_id,
                },
            )
            self.tokens[device_id] = answer["token"]
        return self.tokens[device_id]

    async def connect(
        self, node: QimNode | None = None, device_id: str = "phone", **kwargs: Any
    ) -> QimClient:
        node = node or self.tenant.node
        client = QimClient(node.ws_url, self.token(device_id, node), device_id, reconnect=False, **kwargs)
        await client.connect()
        self.tenant.clients.append(client)
        return client


@dataclass
class TenantHandle:
    """A bootstrapped tenant on a running server, with its admin's token."""

    name: str
    admin_token: str
    node: QimNode
    clients: list[QimClient] = field(default_factory=list)

    def persona(self, name: str) -> Persona:
        """A new user named after `name`, unique across the test session (alice-7...)."""
        user_id = f"{name}-{next(_serial)}"
        api_ok(
            self.node,
            "POST",
            "users",
            self.admin_token,
            json={"username": user_id, "password": PASSWORD, "display_name": name.title()},
        )
        return Persona(tenant=self, user_id=user_id)

    async def close_clients(self) -> None:
        for client in self.clients:
            await client.close()
        self.clients.clear()
