"""Opening a session (protocol.md §3): the socket, AUTH, and what each close code means.

Apart from QimClient so that the handshake's rules (which closes are final, what an AUTH
ERROR looks like) read in one place; QimClient mixes it in."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from .codec import Frame, decode_frame, encode_frame
from .errors import AuthError, ConnectionLost

if TYPE_CHECKING:
    from .pipeline import SentRequest

logger = logging.getLogger("qimclient")

# §3: a bad token gets ERROR then 4401; no AUTH within 10 s gets 4408; a session whose token
# is revoked or expires, or whose user is deactivated, gets ERROR {reason} then 4403.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_CREDENTIALS_REVOKED = 4403
CLOSE_AUTH_TIMEOUT = 4408
# AUTH could not be checked (the server's database is away, or its Redis): a reconnect retries later.
CLOSE_TRY_AGAIN_LATER = 4503
CLOSE_CODE_NAMES = {
    CLOSE_UNAUTHENTICATED: "unauthenticated",
    CLOSE_CREDENTIALS_REVOKED: "credentials_revoked",
    CLOSE_AUTH_TIMEOUT: "auth_timeout",
    CLOSE_TRY_AGAIN_LATER: "unavailable",
}
# Closes after which the same token can never work again: reconnecting would loop.
FINAL_CLOSE_CODES = frozenset({CLOSE_UNAUTHENTICATED, CLOSE_CREDENTIALS_REVOKED})

# Server replies (SYNC_BATCH with 100+ events) can be far larger than the 64 KiB inbound cap.
MAX_INCOMING_BYTES = 64 * 1024 * 1024


class SessionHandshake:
    """Open + AUTH for QimClient (the attributes it reads are QimClient's)."""

    if TYPE_CHECKING:
        ws_url: str
        token: str
        device_id: str
        client_version: str
        origin: str | None
        request_timeout: float

        def _record_close(self, ws: ClientConnection) -> None: ...
        def _note_invalid(self, message: str | bytes) -> None: ...
        def _fail_pending(self, error: ConnectionLost) -> None: ...
        async def _write_pipelined(self, ws: ClientConnection, frames: list[Frame]) -> list[SentRequest]: ...

    async def _open_and_authenticate(
        self, pipelined: Callable[[], list[Frame]] | None = None
    ) -> tuple[ClientConnection, Frame, list[SentRequest]]:
        """Open, AUTH, and return the socket with its AUTH_OK. `pipelined` (a reconnect's
        catch-up) gives requests written right behind AUTH, before AUTH_OK (§3: the server
        handles them after AUTH, in order); their replies are read once the reader runs. If
        AUTH fails they fail with ConnectionLost, as requests do when a socket drops."""
        ws = await connect(
            self.ws_url,
            origin=self.origin,  # type: ignore[arg-type]  # websockets' Origin is a NewType of str
            open_timeout=self.request_timeout,
            max_size=MAX_INCOMING_BYTES,
        )
        try:
            auth = {
                "type": "AUTH",
                "token": self.token,
                "device_id": self.device_id,
                "client_version": self.client_version,
            }
            await ws.send(encode_frame(auth))
            sent = await self._write_pipelined(ws, pipelined()) if pipelined is not None else []
            try:
                async with asyncio.timeout(self.request_timeout):
                    auth_ok = await self._await_auth_reply(ws)
            except TimeoutError:
                raise TimeoutError(f"no AUTH_OK within {self.request_timeout} s") from None
        except BaseException as error:
            await ws.close()
            self._record_close(ws)
            self._fail_pending(ConnectionLost(f"AUTH did not succeed: {error}", self.close_code))
            raise
        return ws, auth_ok, sent

    async def _await_auth_reply(self, ws: ClientConnection) -> Frame:
        while True:
            try:
                message = await ws.recv()
            except ConnectionClosed as closed:
                self._record_close(ws)
                code = code_of(closed)
                name = CLOSE_CODE_NAMES.get(code or 0, "closed")
                reason = (closed.rcvd.reason if closed.rcvd else "") or "connection closed during AUTH"
                raise AuthError(name, reason, code) from None
            frame = decode_frame(message)
            if frame is None:
                self._note_invalid(message)
            elif frame.get("type") == "AUTH_OK":
                return frame
            elif frame.get("type") == "ERROR":
                close_code = await self._wait_server_close(ws)
                code = str(frame.get("code", "unauthenticated"))
                raise AuthError(code, str(frame.get("message", "")), close_code)
            else:
                logger.warning("ignoring %s frame received before AUTH_OK", frame.get("type"))

    async def _wait_server_close(self, ws: ClientConnection) -> int | None:
        """After an AUTH ERROR the server closes (4401); read until it does, to report its code."""
        try:
            async with asyncio.timeout(min(self.request_timeout, 5.0)):
                while True:
                    await ws.recv()
        except (ConnectionClosed, TimeoutError):
            pass
        self._record_close(ws)
        return ws.close_code


def code_of(closed: ConnectionClosed) -> int | None:
    """The close code the peer sent, else ours (None if neither side sent one)."""
    if closed.rcvd is not None:
        return closed.rcvd.code
    return closed.sent.code if closed.sent is not None else None
