"""A Web Push service stand-in (RFC 8030 delivery, RFC 8291 aes128gcm, RFC 8292 VAPID) for tests.

It checks what a real push service checks and decrypts every body as the browser would, so a
test asserts what the browser's service worker would receive, not that a function was called.

Start it (HTTP/1.1 and h2c on plain http; pass `tls=make_tls_files(dir)` for https, then
trust that cert with QIM_PUSH_CA_FILE):

    with running_webpush_standin() as push:          # push.base_url = "http://127.0.0.1:<port>"
        subscription = push.subscribe("bob-laptop")   # {endpoint, keys: {p256dh, auth}}
        # POST devices/{id}/push {"platform": "web", "subscription": subscription}, with the
        # server's env QIM_WEB_PUSH_ENDPOINT_HOSTS=127.0.0.1 and QIM_WEB_PUSH_ALLOW_HTTP=1
        got = push.wait_received("bob-laptop", 1)     # [Received], decrypted; waits up to 30 s
        got[0].payload   # the decrypted JSON; got[0].headers (lower-case), got[0].claims (the JWT's)

Script the answers of one subscription, in order (the default after the script is 201):

    push.script("bob-laptop", Answer(410))                         # unsubscribed
    push.script("bob-laptop", Answer(429, retry_after="120"))      # throttled
    push.script("bob-laptop", Answer(503), Answer(201))            # a server error, then fine
    push.expire_jwt_once("bob-laptop")   # 403 "VAPID JWT expired" to the next request, and to
                                         # any later one that carries that same JWT

Every request, answered or refused, is in `push.requests` (path, status, headers, payload or
None); `push.refusals` lists the requests the stand-in refused for breaking the protocol (a
bad VAPID JWT, a missing TTL...), with the reason: a test that expects a clean run asserts it
is empty. The browser's private key never leaves the stand-in.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import http_ece
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.harness.asgi_server import serving
from tests.harness.tls import TlsFiles

MAX_BODY_BYTES = 4096  # what push services accept (RFC 8030 §7.2: at least 4096 octets)
MAX_JWT_LIFETIME_S = 24 * 3600  # RFC 8292 §2: exp no more than 24 hours from the request
URGENCIES = {"very-low", "low", "normal", "high"}  # RFC 8030 §5.3
PUSH_PATH = "/push/"


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Answer:
    """One scripted answer: a status, a Retry-After, a body."""

    status: int
    retry_after: str | None = None
    body: str = ""


@dataclass(frozen=True)
class Received:
    """One request the stand-in saw on a subscription path."""

    name: str  # the subscription's name (the last path segment)
    status: int  # what the stand-in answered
    headers: dict[str, str]  # lower-case names
    claims: dict[str, Any] | None  # the VAPID JWT's claims, when it verified
    payload: Any  # the decrypted body: parsed JSON, else text (None when refused before decrypting)
    plaintext_bytes: int  # size of the decrypted body
    body_bytes: int  # size of the encrypted body on the wire
    at: float  # time.time() when it arrived


@dataclass
class Browser:
    """What a browser keeps for one subscription: its ECDH key pair and auth secret."""

    private_key: ec.EllipticCurvePrivateKey
    auth_secret: bytes

    def keys(self) -> dict[str, str]:
        point = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return {"p256dh": b64url(point), "auth": b64url(self.auth_secret)}


class ProtocolError(Exception):
    """A request a real push service would refuse; carries the status it answers."""

    def __init__(self, status: int, reason: str, violation: bool = True) -> None:
        super().__init__(reason)
        self.status = status
        self.violation = violation  # False: a scripted or ordinary answer, not the client's fault


@dataclass
class WebPushStandIn:
    base_url: str = ""
    browsers: dict[str, Browser] = field(default_factory=dict)
    scripts: dict[str, list[Answer]] = field(default_factory=dict)
    expired_jwts: set[str] = field(default_factory=set)
    expire_next: set[str] = field(default_factory=set)
    requests: list[Received] = field(default_factory=list)
    refusals: list[tuple[str, str]] = field(default_factory=list)  # (name, reason)
    changed: threading.Condition = field(default_factory=threading.Condition)

    # -- what tests call -------------------------------------------------------------------

    def subscribe(self, name: str) -> dict[str, Any]:
        """A new browser subscription at this stand-in: the PushSubscription.toJSON()."""
        browser = Browser(ec.generate_private_key(ec.SECP256R1()), os.urandom(16))
        with self.changed:
            self.browsers[name] = browser
        return {"endpoint": f"{self.base_url}{PUSH_PATH}{name}", "keys": browser.keys()}

    def script(self, name: str, *answers: Answer) -> None:
        with self.changed:
            self.scripts.setdefault(name, []).extend(answers)

    def expire_jwt_once(self, name: str) -> None:
        """The next request on `name` gets 403 "VAPID JWT expired", and so does every later
        request carrying the JWT it refused: only a renewed JWT gets through."""
        with self.changed:
            self.expire_next.add(name)

    def received(self, name: str, status: int | None = 201) -> list[Received]:
        """The requests on `name` (those answered `status`; None: all of them)."""
        with self.changed:
            return [r for r in self.requests if r.name == name and (status is None or r.status == status)]

    def wait_received(self, name: str, count: int, status: int | None = 201, timeout_s: float = 30.0) -> list[Received]:
        """Wait until `count` requests on `name` were answered `status`; answers them all."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while len(got := self.received(name, status)) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{name}: {len(got)} of {count} pushes after {timeout_s}s; refusals {self.refusals}")
                self.changed.wait(left)
            return got

    # -- the push service ------------------------------------------------------------------

    def handle(self, name: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], str]:
        """Check, decrypt and record one push; answers (status, headers, body)."""
        claims, payload, plaintext = None, None, b""
        try:
            token, claims = self._check_vapid(headers)
            self._check_headers(headers, body)
            with self.changed:
                browser = self.browsers.get(name)
                scripted = self._scripted_answer(name, token)
            if browser is None:
                raise ProtocolError(404, "no such subscription", violation=False)
            plaintext = self._decrypt(browser, body)
            payload = _parsed(plaintext)
            answer = scripted or Answer(201)
        except ProtocolError as exc:
            answer = Answer(exc.status, body=json.dumps({"reason": str(exc)}))
            if exc.violation:
                with self.changed:
                    self.refusals.append((name, str(exc)))
        self._record(Received(name, answer.status, headers, claims, payload, len(plaintext), len(body), time.time()))
        extra = {"retry-after": answer.retry_after} if answer.retry_after is not None else {}
        if answer.status in (200, 201, 202):
            extra["location"] = f"{self.base_url}/message/{len(self.requests)}"
        return answer.status, extra, answer.body

    def _scripted_answer(self, name: str, token: str) -> Answer | None:
        if token in self.expired_jwts or name in self.expire_next:
            self.expire_next.discard(name)
            self.expired_jwts.add(token)
            raise ProtocolError(403, "VAPID JWT expired", violation=False)
        queue = self.scripts.get(name)
        return queue.pop(0) if queue else None

    def _check_vapid(self, headers: dict[str, str]) -> tuple[str, dict[str, Any]]:
        scheme, _, params = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "vapid":
            raise ProtocolError(401, "Authorization is not `vapid t=..., k=...`")
        parts = dict(p.strip().split("=", 1) for p in params.split(",") if "=" in p)
        token, key = parts.get("t", ""), parts.get("k", "")
        try:
            public_key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64url_decode(key))
            claims = jwt.decode(
                token, public_key, algorithms=["ES256"], audience=self.base_url,
                options={"require": ["aud", "exp", "sub"]},
            )
        except (ValueError, jwt.PyJWTError) as exc:
            raise ProtocolError(401, f"VAPID JWT does not verify: {exc}") from None
        if claims["exp"] > time.time() + MAX_JWT_LIFETIME_S + 60:
            raise ProtocolError(401, "VAPID JWT exp is more than 24 hours away")
        if not str(claims["sub"]).startswith(("mailto:", "https:")):
            raise ProtocolError(401, "VAPID JWT sub is neither mailto: nor https:")
        return token, claims

    @staticmethod
    def _check_headers(headers: dict[str, str], body: bytes) -> None:
        if not headers.get("ttl", "").isdigit():
            raise ProtocolError(400, "TTL header missing or not a number of seconds")
        if "urgency" in headers and headers["urgency"] not in URGENCIES:
            raise ProtocolError(400, f"Urgency {headers['urgency']!r} is not one of RFC 8030's")
        topic = headers.get("topic")
        if topic is not None and (len(topic) > 32 or not all(c.isalnum() or c in "-_" for c in topic)):
            raise ProtocolError(400, "Topic must be at most 32 base64url characters")
        if headers.get("content-encoding") != "aes128gcm":
            raise ProtocolError(400, "Content-Encoding is not aes128gcm")
        if len(body) > MAX_BODY_BYTES:
            raise ProtocolError(413, f"body is {len(body)} bytes, over {MAX_BODY_BYTES}")

    @staticmethod
    def _decrypt(browser: Browser, body: bytes) -> bytes:
        try:
            return http_ece.decrypt(
                body, private_key=browser.private_key, auth_secret=browser.auth_secret, version="aes128gcm"
            )
        except Exception as exc:  # http_ece raises several kinds; any is a body we cannot read
            raise ProtocolError(400, f"body does not decrypt: {type(exc).__name__}: {exc}") from None

    def _record(self, received: Received) -> None:
        with self.changed:
            self.requests.append(received)
            self.changed.notify_all()

    # -- ASGI ------------------------------------------------------------------------------

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                event = (await receive())["type"]
                if event == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif event == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        path = scope["path"]
        if scope["method"] != "POST" or not path.startswith(PUSH_PATH):
            status, extra, text = 404, {}, json.dumps({"reason": "not a push resource"})
        else:
            status, extra, text = self.handle(path[len(PUSH_PATH):], headers, body)
        raw = [(k.encode(), v.encode()) for k, v in {"content-type": "application/json", **extra}.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": text.encode()})


def _parsed(plaintext: bytes) -> Any:
    """The body as JSON, or as text when it is not JSON (what a service worker's
    event.data.json() or .text() would give)."""
    try:
        return json.loads(plaintext)
    except ValueError:
        return plaintext.decode(errors="replace")


@contextmanager
def running_webpush_standin(tls: TlsFiles | None = None) -> Iterator[WebPushStandIn]:
    """A WebPushStandIn served on 127.0.0.1 until the block ends (https when `tls` is given)."""
    standin = WebPushStandIn()
    with serving(standin, tls) as base_url:
        standin.base_url = base_url
        yield standin
