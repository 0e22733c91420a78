"""A local FCM: Google's OAuth2 token endpoint and the FCM HTTP v1 `messages:send` endpoint.

One ASGI app (serve it with tests.harness.asgi_server.serving). The token endpoint verifies
the service account's RS256 assertion as Google does (signature against the account's public
key, its key id, iss, aud, scope, a lifetime of at most an hour) and issues opaque access
tokens; the send endpoint accepts only those tokens, for the account's own project, checks
the message's shape and size and records what a device would receive. Tests script answers
per registration token (UNREGISTERED, INVALID_ARGUMENT, 429, 503) and can expire every
access token at once, as Google does when it revokes them.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
# The audience Google's token endpoint demands, whatever token_uri the account names (and
# what google-auth signs): the assertion is for Google's OAuth2 service, not for a URL.
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
FCM_ERROR = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
SEND_PATH = re.compile(r"^/v1/projects/([a-z0-9-]+)/messages:send$")
MESSAGE_KEYS = {"token", "notification", "data", "android", "apns", "webpush", "fcm_options", "name"}
ANDROID_KEYS = {"collapse_key", "priority", "ttl", "restricted_package_name", "data", "notification", "fcm_options", "direct_boot_ok"}
TTL = re.compile(r"^\d+(\.\d{1,9})?s$")
PAYLOAD_LIMIT = 4096


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict
    headers: tuple[tuple[str, str], ...] = ()


def fcm_error(status: int, name: str, message: str, *details: dict, headers: tuple = ()) -> Answer:
    return Answer(status, {"error": {"code": status, "message": message, "status": name, "details": list(details)}}, headers)


def unregistered() -> Answer:
    return fcm_error(404, "NOT_FOUND", "Requested entity was not found.", {"@type": FCM_ERROR, "errorCode": "UNREGISTERED"})


def invalid_token() -> Answer:
    return fcm_error(400, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token",
                     {"@type": FCM_ERROR, "errorCode": "INVALID_ARGUMENT"})


def throttled(retry_after_s: int) -> Answer:
    return fcm_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded for the device.",
                     {"@type": FCM_ERROR, "errorCode": "QUOTA_EXCEEDED"}, headers=(("retry-after", str(retry_after_s)),))


def unavailable(retry_after_s: int | None = None) -> Answer:
    headers = (("retry-after", str(retry_after_s)),) if retry_after_s is not None else ()
    return fcm_error(503, "UNAVAILABLE", "The service is currently unavailable.",
                     {"@type": FCM_ERROR, "errorCode": "UNAVAILABLE"}, headers=headers)


@dataclass
class Received:
    """A message FCM accepted: what the device will get."""

    project_id: str
    message: dict
    http_version: str
    name: str


@dataclass
class Account:
    project_id: str
    client_email: str
    private_key_id: str
    public_key: rsa.RSAPublicKey


@dataclass
class FcmStandIn:
    token_lifetime_s: int = 3600
    base_url: str = ""  # set once served: token_uri is base_url + "/token"
    accounts: dict[str, Account] = field(default_factory=dict)
    issued: dict[str, tuple[str, float]] = field(default_factory=dict)  # token -> (email, expires)
    token_requests: list[dict] = field(default_factory=list)  # verified assertion claims
    received: list[Received] = field(default_factory=list)
    refused: list[tuple[int, str, dict]] = field(default_factory=list)  # (status, reason, body)
    scripts: dict[str, list[Answer]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def token_uri(self) -> str:
        return f"{self.base_url}/token"

    def new_service_account(self, project_id: str) -> dict:
        """A service account JSON as Google issues it, whose token_uri is this stand-in."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        email = f"push@{project_id}.iam.gserviceaccount.com"
        key_id = secrets.token_hex(20)
        self.accounts[email] = Account(project_id, email, key_id, key.public_key())
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        return {
            "type": "service_account", "project_id": project_id, "private_key_id": key_id,
            "private_key": pem.decode(), "client_email": email, "client_id": "1",
            "token_uri": self.token_uri,
        }

    def script(self, device_token: str, *answers: Answer) -> None:
        """The next sends to `device_token` get these answers, in order; then 200 again."""
        with self.lock:
            self.scripts.setdefault(device_token, []).extend(answers)

    def expire_access_tokens(self) -> None:
        with self.lock:
            self.issued = {token: (email, 0.0) for token, (email, _) in self.issued.items()}

    def messages_to(self, device_token: str) -> list[dict]:
        with self.lock:
            return [r.message for r in self.received if r.message.get("token") == device_token]

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "lifespan":
            while True:
                kind = (await receive())["type"]
                await send({"type": f"{kind}.complete"})  # lifespan.startup / .shutdown
                if kind == "lifespan.shutdown":
                    return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        answer = self.answer(scope, body)
        headers = [(b"content-type", b"application/json")] + [(k.encode(), v.encode()) for k, v in answer.headers]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": json.dumps(answer.body).encode()})

    def answer(self, scope: dict, body: bytes) -> Answer:
        path, method = scope["path"], scope["method"]
        if method == "POST" and path == "/token":
            return self.token(body)
        match = SEND_PATH.match(path)
        if method == "POST" and match:
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            with self.lock:
                return self.send(match.group(1), headers, body, scope.get("http_version", ""))
        return fcm_error(404, "NOT_FOUND", f"no {method} {path}")

    def token(self, body: bytes) -> Answer:
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        if form.get("grant_type") != JWT_BEARER or "assertion" not in form:
            return self._oauth_refusal("unsupported_grant_type", "grant_type must be jwt-bearer")
        try:
            header = jwt.get_unverified_header(form["assertion"])
            issuer = jwt.decode(form["assertion"], options={"verify_signature": False}).get("iss", "")
            account = self.accounts[issuer]
            claims = jwt.decode(
                form["assertion"], account.public_key, algorithms=["RS256"], audience=GOOGLE_TOKEN_AUDIENCE,
                issuer=account.client_email, options={"require": ["iss", "aud", "exp", "iat", "scope"]},
            )
        except (jwt.PyJWTError, KeyError) as exc:
            return self._oauth_refusal("invalid_grant", f"assertion refused: {type(exc).__name__}")
        if header.get("kid") != account.private_key_id or SCOPE not in claims["scope"].split():
            return self._oauth_refusal("invalid_scope" if header.get("kid") == account.private_key_id else "invalid_grant", "bad kid or scope")
        if not 0 < claims["exp"] - claims["iat"] <= 3600:
            return self._oauth_refusal("invalid_grant", "an assertion lives at most one hour")
        access = "ya29." + secrets.token_urlsafe(32)
        with self.lock:
            self.token_requests.append(claims)
            self.issued[access] = (account.client_email, time.monotonic() + self.token_lifetime_s)
        return Answer(200, {"access_token": access, "expires_in": self.token_lifetime_s, "token_type": "Bearer"})

    def _oauth_refusal(self, error: str, description: str) -> Answer:
        with self.lock:
            self.refused.append((400, error, {}))
        return Answer(400, {"error": error, "error_description": description})

    def send(self, project_id: str, headers: dict[str, str], body: bytes, http_version: str) -> Answer:
        """Called under the lock."""
        auth = headers.get("authorization", "")
        email, expires = self.issued.get(auth.removeprefix("Bearer "), ("", 0.0))
        if not auth.startswith("Bearer ") or expires <= time.monotonic():
            return self._refuse(fcm_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials."), {})
        if self.accounts[email].project_id != project_id:
            return self._refuse(fcm_error(403, "PERMISSION_DENIED", "The caller does not have permission"), {})
        try:
            message = json.loads(body)["message"]
        except (ValueError, KeyError, TypeError):
            return self._refuse(bad_request("message", "Invalid JSON payload received."), {})
        violation = shape_violation(message)
        if violation:
            return self._refuse(bad_request(*violation), message)
        script = self.scripts.get(message["token"])
        if script:
            return self._refuse(script.pop(0), message)
        name = f"projects/{project_id}/messages/{len(self.received) + 1}"
        self.received.append(Received(project_id, message, http_version, name))
        return Answer(200, {"name": name})

    def _refuse(self, answer: Answer, message: dict) -> Answer:
        self.refused.append((answer.status, answer.body["error"]["status"], message))
        return answer


def shape_violation(message: object) -> tuple[str, str] | None:
    """(field, description) of the first thing FCM would refuse in a message, or None."""
    if not isinstance(message, dict) or not isinstance(message.get("token"), str) or not message["token"]:
        return ("message.token", "a message to a device needs its registration token")
    unknown = set(message) - MESSAGE_KEYS
    if unknown:
        return (f"message.{sorted(unknown)[0]}", "Unknown name")
    data = message.get("data", {})
    if not isinstance(data, dict) or any(not isinstance(v, str) for v in data.values()):
        return ("message.data", "data values must be strings")
    notification = message.get("notification", {})
    if not isinstance(notification, dict) or set(notification) - {"title", "body", "image"}:
        return ("message.notification", "Unknown name")
    android = message.get("android", {})
    if not isinstance(android, dict) or set(android) - ANDROID_KEYS:
        return ("message.android", "Unknown name")
    if android.get("priority", "normal") not in ("normal", "high"):
        return ("message.android.priority", "must be NORMAL or HIGH")
    if "ttl" in android and not TTL.match(str(android["ttl"])):
        return ("message.android.ttl", "Invalid duration")
    payload = json.dumps({"data": data, "notification": notification}, separators=(",", ":")).encode()
    if len(payload) > PAYLOAD_LIMIT:
        return ("message", f"Message is too big ({len(payload)} bytes)")
    return None


def bad_request(field_name: str, description: str) -> Answer:
    return fcm_error(400, "INVALID_ARGUMENT", description,
                     {"@type": BAD_REQUEST, "fieldViolations": [{"field": field_name, "description": description}]})
