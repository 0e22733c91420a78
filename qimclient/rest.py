"""Async REST helpers for `/api/v1/` (protocol.md §3): token login and an authenticated client."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from .errors import ApiError

DEFAULT_TIMEOUT = 10.0


async def login(
    base_url: str,
    tenant: str,
    username: str,
    password: str,
    device_id: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[str, str]:
    """POST `auth/token`; returns `(token, user_id)`. The token is bound to `device_id` (§10)."""
    body = {"tenant": tenant, "username": username, "password": password, "device_id": device_id}
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout) as http:
        answer = await _call(http, "POST", "/api/v1/auth/token", body)
    return answer["token"], answer["user_id"]


class RestClient:
    """Calls `/api/v1/...` with `Authorization: Token <token>`; answers parsed JSON, raises ApiError.

    Paths are given whole and without a trailing slash, e.g. `/api/v1/users`.
    Use as `async with RestClient(...)`, or call `aclose()` when done.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Token {token}"},
            timeout=timeout,
            transport=transport,
        )

    async def get(self, path: str, json: Any = None) -> Any:
        """GET `path`."""
        return await _call(self._http, "GET", path, json)

    async def post(self, path: str, json: Any = None) -> Any:
        """POST `json` to `path` (creation answers 201)."""
        return await _call(self._http, "POST", path, json)

    async def put(self, path: str, json: Any = None) -> Any:
        """PUT `json` to `path`."""
        return await _call(self._http, "PUT", path, json)

    async def patch(self, path: str, json: Any = None) -> Any:
        """PATCH `json` to `path`."""
        return await _call(self._http, "PATCH", path, json)

    async def delete(self, path: str, json: Any = None) -> Any:
        """DELETE `path`; None when the server answers with no body."""
        return await _call(self._http, "DELETE", path, json)

    # Conversations (§3): thin wrappers that name the paths and answer the useful field.

    async def create_group(self, title: str, member_user_ids: Iterable[str], *, e2ee: bool = False) -> str:
        """POST `conversations` kind group (you are a member and its owner); answers its conversation_id."""
        body = {"kind": "group", "title": title, "member_user_ids": list(member_user_ids), "e2ee": e2ee}
        answer = await self.post("/api/v1/conversations", json=body)
        return str(answer["conversation_id"])

    async def create_direct(self, user_id: str) -> str:
        """Find or create the direct conversation with `user_id`; answers its conversation_id."""
        answer = await self.post("/api/v1/conversations", json={"kind": "direct", "member_user_ids": [user_id]})
        return str(answer["conversation_id"])

    async def add_members(self, conversation_id: str, user_ids: Iterable[str]) -> int:
        """Add members; answers the conversation_seq of the `qim.membership.v1` join event."""
        answer = await self.post(f"{_conversation_path(conversation_id)}/members", json={"user_ids": list(user_ids)})
        return int(answer["conversation_seq"])

    async def remove_member(self, conversation_id: str, user_id: str) -> int:
        """Leave (your own user_id) or remove someone (the group's owner, its admins for plain
        members, or a tenant admin); answers the event's conversation_seq."""
        answer = await self.delete(_member_path(conversation_id, user_id))
        return int(answer["conversation_seq"])

    # Groups (protocol §17): roles, policies, tiers.

    async def get_conversation(self, conversation_id: str) -> dict[str, Any]:
        """GET `conversations/{id}`: `{conversation_id, kind, title, mention_all_policy,
        add_members_policy, member_count, role, tier, member}`, the last three yours."""
        answer: dict[str, Any] = await self.get(_conversation_path(conversation_id))
        return answer

    async def update_conversation(
        self,
        conversation_id: str,
        *,
        title: str | None = None,
        mention_all_policy: str | None = None,
        add_members_policy: str | None = None,
    ) -> dict[str, Any]:
        """PATCH `conversations/{id}` (the owner and admins): rename the group or set its
        policies (`admins` or `members`); answers its settings and `conversation_seq`, the
        seq of the qim.group.v1 event (None when nothing changed)."""
        changes = {"title": title, "mention_all_policy": mention_all_policy, "add_members_policy": add_members_policy}
        body = {name: value for name, value in changes.items() if value is not None}
        if not body:
            raise ValueError("name a title or a policy to change")
        answer: dict[str, Any] = await self.patch(_conversation_path(conversation_id), json=body)
        return answer

    async def list_members(self, conversation_id: str, *, page_size: int | None = None) -> list[dict[str, Any]]:
        """GET `conversations/{id}/members`, every page (following `next`): the current members
        `{user_id, display_name, role}` ordered by user_id. `page_size` is the server's `limit`
        (1 to 1 000, default 100)."""
        members: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            query = {name: value for name, value in (("after", after), ("limit", page_size)) if value is not None}
            path = f"{_conversation_path(conversation_id)}/members"
            page = await self.get(f"{path}?{urlencode(query)}" if query else path)
            members += page["members"]
            after = page.get("next")
            if not after or not page["members"]:
                return members

    async def set_member_role(self, conversation_id: str, user_id: str, role: str) -> dict[str, Any]:
        """PATCH `{role}` of a member (the owner only): `admin`, `member`, or `owner` to hand
        ownership over (you become an admin). Answers `{user_id, role, conversation_seq}`, the
        seq None when they held that role already."""
        answer: dict[str, Any] = await self.patch(_member_path(conversation_id, user_id), json={"role": role})
        return answer

    async def set_tier(self, conversation_id: str, user_id: str, tier: str) -> dict[str, Any]:
        """PATCH your own mailbox `{tier}`: `full` or `mention_only` (§17.4); `user_id` must be
        yours (403 otherwise). Answers `{user_id, tier}`."""
        answer: dict[str, Any] = await self.patch(_member_path(conversation_id, user_id), json={"tier": tier})
        return answer

    async def logout(self) -> None:
        """DELETE `auth/token`: revoke this client's token; its sockets are closed (4403)."""
        await self.delete("/api/v1/auth/token")

    async def aclose(self) -> None:
        """Close the underlying HTTP connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> RestClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _conversation_path(conversation_id: str) -> str:
    return f"/api/v1/conversations/{quote(conversation_id, safe='')}"


def _member_path(conversation_id: str, user_id: str) -> str:
    return f"{_conversation_path(conversation_id)}/members/{quote(user_id, safe='')}"


async def _call(http: httpx.AsyncClient, method: str, path: str, body: Any) -> Any:
    response = await http.request(method, path, json=body)
    if not response.is_success:
        raise _error_from(response)
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        snippet = response.text[:200]
        message = f"{method} {path} answered non-JSON: {snippet!r}"
        raise ApiError(response.status_code, "bad_response", message) from None


def _error_from(response: httpx.Response) -> ApiError:
    """Read the `{code, message}` body; fall back to the HTTP status (a proxy's or a 500 page)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    fallback_code = f"http_{response.status_code}"
    if isinstance(body, dict):
        message = body.get("message") or body.get("detail") or response.text[:200]
        retry_after_ms = body.get("retry_after_ms")
        return ApiError(response.status_code, str(body.get("code") or fallback_code), str(message),
                        retry_after_ms if isinstance(retry_after_ms, int) else None)
    return ApiError(response.status_code, fallback_code, response.text[:200] or response.reason_phrase)
