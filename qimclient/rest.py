"""Async REST helpers for `/api/v1/` (protocol.md §3): token login and an authenticated client."""

from __future__ import annotations

from typing import Any

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

    async def aclose(self) -> None:
        """Close the underlying HTTP connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> RestClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


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
        return ApiError(response.status_code, str(body.get("code") or fallback_code), str(message))
    return ApiError(response.status_code, fallback_code, response.text[:200] or response.reason_phrase)
