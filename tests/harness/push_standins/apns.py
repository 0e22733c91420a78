"""A local APNs: Apple's HTTP/2 provider API as far as a provider server can see it.

Serve it with tests.harness.asgi_server.serving(standin, tls=...) so clients negotiate HTTP/2
over TLS by ALPN. Each request is checked as Apple checks it: the ES256 provider JWT against
the test key (kid, iss, an iat under an hour old), `POST /3/device/<64 hex>`, apns-push-type,
apns-topic against the bundle (`.voip` for VoIP), priority, expiration, collapse id, a JSON
object body under the type's size limit. Refusals answer Apple's status and `{"reason"}`.
Accepted pushes are recorded; answers can be scripted per device token (`script`).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from urllib.parse import unquote

import jwt

DEVICE_PATH = re.compile(r"^/3/device/([^/]+)$")
DEVICE_TOKEN = re.compile(r"^[0-9a-fA-F]{64}$")
LIMITS = {"alert": 4096, "voip": 5120, "background": 4096}
TOKEN_MAX_AGE_S = 3600


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str = ""
    retry_after: str | None = None
    stall_s: float = 0.0  # answer only after this long (a provider too slow to wait for)


@dataclass
class Seen:
    """One request as the stand-in saw it, with what it answered."""

    token: str
    headers: dict[str, str]
    payload: dict | None
    http_version: str
    status: int
    reason: str
    provider_token: str
    client: tuple  # the connection's (host, port): one per kept-alive HTTP/2 connection
    received_at: float = field(default_factory=time.time)  # Unix seconds


@dataclass
class ApnsStandIn:
    public_key_pem: str
    key_id: str
    team_id: str
    bundle_id: str
    seen: list[Seen] = field(default_factory=list)
    script: dict[str, list[Answer]] = field(default_factory=lambda: defaultdict(list))

    @property
    def accepted(self) -> list[Seen]:
        return [s for s in self.seen if s.status == 200]

    def for_token(self, token: str) -> list[Seen]:
        return [s for s in self.seen if s.token == token]

    def answer(self, token: str, *answers: Answer) -> None:
        """The next answers to pushes for `token` (after the checks pass), in order."""
        self.script[token].extend(answers)

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        body = await _read_body(receive)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        match = DEVICE_PATH.match(scope.get("raw_path", b"").decode("latin-1").split("?", 1)[0])
        token = unquote(match.group(1)) if match else ""
        bearer = headers.get("authorization", "").removeprefix("bearer ")
        answer, payload = self._judge(scope, headers, token, body)
        if answer.status == 200 and self.script.get(token):
            answer = self.script[token].pop(0)
        if answer.stall_s:
            await asyncio.sleep(answer.stall_s)
        self.seen.append(
            Seen(token, headers, payload, scope["http_version"], answer.status, answer.reason, bearer,
                 tuple(scope.get("client") or ()))
        )
        await _respond(send, answer)

    def _judge(self, scope, headers: dict[str, str], token: str, body: bytes) -> tuple[Answer, dict | None]:  # type: ignore[no-untyped-def]
        if scope["method"] != "POST":
            return Answer(405, "MethodNotAllowed"), None
        if not token:
            return Answer(404, "BadPath"), None
        refused = self._check_provider_token(headers.get("authorization", ""))
        refused = refused or self._check_headers(headers)
        if refused is not None:
            return refused, None
        if not DEVICE_TOKEN.match(token):
            return Answer(400, "BadDeviceToken"), None
        return self._check_payload(headers["apns-push-type"], body)

    def _check_provider_token(self, authorization: str) -> Answer | None:
        if not authorization.startswith("bearer "):
            return Answer(403, "MissingProviderToken")
        provider_token = authorization.removeprefix("bearer ")
        try:
            header = jwt.get_unverified_header(provider_token)
            claims = jwt.decode(provider_token, self.public_key_pem, algorithms=["ES256"], options={"verify_iat": False})
        except jwt.PyJWTError:
            return Answer(403, "InvalidProviderToken")
        if header.get("kid") != self.key_id or claims.get("iss") != self.team_id or not isinstance(claims.get("iat"), int):
            return Answer(403, "InvalidProviderToken")
        if time.time() - claims["iat"] > TOKEN_MAX_AGE_S:
            return Answer(403, "ExpiredProviderToken")
        return None

    def _check_headers(self, headers: dict[str, str]) -> Answer | None:
        push_type = headers.get("apns-push-type")
        if push_type not in LIMITS:
            return Answer(400, "InvalidPushType")
        topic = headers.get("apns-topic")
        if not topic:
            return Answer(400, "MissingTopic")
        if topic != (f"{self.bundle_id}.voip" if push_type == "voip" else self.bundle_id):
            return Answer(400, "TopicDisallowed" if topic.startswith(self.bundle_id) else "BadTopic")
        if headers.get("apns-priority", "10") not in ("10", "5", "1"):
            return Answer(400, "BadPriority")
        if not headers.get("apns-expiration", "0").isdigit():
            return Answer(400, "BadExpirationDate")
        if len(headers.get("apns-collapse-id", "").encode()) > 64:
            return Answer(400, "BadCollapseId")
        return None

    def _check_payload(self, push_type: str, body: bytes) -> tuple[Answer, dict | None]:
        if not body:
            return Answer(400, "PayloadEmpty"), None
        if len(body) > LIMITS[push_type]:
            return Answer(413, "PayloadTooLarge"), None
        try:
            payload = json.loads(body)
        except ValueError:
            return Answer(400, "BadPayload"), None  # not one of Apple's reasons: a bug of ours
        if not isinstance(payload, dict) or (push_type == "alert" and not isinstance(payload.get("aps"), dict)):
            return Answer(400, "BadPayload"), None
        return Answer(200), payload


async def _read_body(receive) -> bytes:  # type: ignore[no-untyped-def]
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _respond(send, answer: Answer) -> None:  # type: ignore[no-untyped-def]
    headers = [(b"apns-id", str(uuid.uuid4()).encode())]
    body = b""
    if answer.status != 200:
        document: dict = {"reason": answer.reason}
        if answer.status == 410:
            document["timestamp"] = int(time.time() * 1000)
        body = json.dumps(document).encode()
        headers.append((b"content-type", b"application/json"))
    if answer.retry_after is not None:
        headers.append((b"retry-after", answer.retry_after.encode()))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive, send) -> None:  # type: ignore[no-untyped-def]
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def new_signing_key() -> tuple[str, str]:
    """A fresh APNs-style signing key: (the .p8 PKCS#8 PEM, its public key PEM)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    return private, public
