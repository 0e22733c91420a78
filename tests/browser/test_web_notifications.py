"""Web notifications in the web client: "Enable notifications" subscribes the browser and the
server keeps the subscription; an offline user's message goes out through a real
qim_push_worker to the local Web Push stand-in, which decrypts it; those bytes, handed to the
page's service worker as the push service would, become a notification with the sender and
the preview. Disable, Log out and a late call leave nothing behind.

One piece is replaced: PushManager's subscribe/getSubscription/unsubscribe (an init script).
A real subscribe() asks the browser's push service (Google's, for Chromium), which is out of
reach here; the replacement answers a subscription at the stand-in whose keys the stand-in
holds, as the push service would, and records the applicationServerKey the page passed.
Everything else (permission, service worker, REST, the worker, encryption, the push event,
showNotification) is the real thing."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser.conftest import new_context, screenshot
from tests.browser.helpers import group_of, log_in, send_as
from tests.conftest import QimDeployment, start_embedded
from tests.harness.personas import Persona, api_ok
from tests.harness.push_standins.webpush import WebPushStandIn, running_webpush_standin

VAPID_PEM = ec.generate_private_key(ec.SECP256R1()).private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
).decode()
WEB_ENV = {
    "QIM_VAPID_PRIVATE_KEY": VAPID_PEM,
    "QIM_VAPID_SUBJECT": "mailto:ops@example.test",
    # The stand-in listens on plain http at 127.0.0.1: widen the SSRF allow-list for it only.
    "QIM_WEB_PUSH_ENDPOINT_HOSTS": "127.0.0.1",
    "QIM_WEB_PUSH_ALLOW_HTTP": "1",
}
WAIT_S = 60.0  # generous: a loaded 2-core machine

# The browser's push service, replaced: `subscription` is what the stand-in made for this
# browser; "subscribed" lives in localStorage so it outlasts a reload, as a real one does.
PUSH_SERVICE = """
(() => {
  const subscription = %s;
  const fake = (options) => ({
    endpoint: subscription.endpoint, expirationTime: null, options,
    toJSON: () => ({ endpoint: subscription.endpoint, expirationTime: null, keys: subscription.keys }),
    unsubscribe: async () => { localStorage.removeItem("test.subscribed"); return true; },
  });
  PushManager.prototype.subscribe = async function (options) {
    const key = Array.from(new Uint8Array(options.applicationServerKey.buffer || options.applicationServerKey));
    localStorage.setItem("test.subscribed", JSON.stringify({ userVisibleOnly: options.userVisibleOnly, key }));
    return fake({ userVisibleOnly: options.userVisibleOnly, applicationServerKey: new Uint8Array(key).buffer });
  };
  PushManager.prototype.getSubscription = async function () {
    const made = JSON.parse(localStorage.getItem("test.subscribed") || "null");
    return made && fake({ userVisibleOnly: made.userVisibleOnly, applicationServerKey: new Uint8Array(made.key).buffer });
  };
})();
"""

NOTIFICATIONS = """async () => {
  const registration = await navigator.serviceWorker.getRegistration("/");
  const shown = registration ? await registration.getNotifications() : [];
  return shown.map((n) => ({ title: n.title, body: n.body, tag: n.tag, data: n.data }));
}"""


@pytest.fixture(scope="module")
def push() -> Iterator[WebPushStandIn]:
    with running_webpush_standin() as standin:
        yield standin


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@contextmanager
def browser_with_push(browser: Browser, base: str, subscription: dict) -> Iterator[tuple[BrowserContext, Page]]:
    """A browser context that may show notifications, whose push service is the stand-in;
    on leaving, it closes, and none of its requests may have left 127.0.0.1."""
    context, log = new_context(browser)
    context.grant_permissions(["notifications"], origin=base)
    context.add_init_script(PUSH_SERVICE % json.dumps(subscription))
    try:
        yield context, context.new_page()
    finally:
        foreign = log.foreign()
        context.close()
    assert foreign == []


def stored_push(web: QimDeployment, persona: Persona, device_id: str) -> tuple[str, str]:
    rows = web.db.query(
        "SELECT d.push_platform, d.push_token FROM qim_device d JOIN qim_user u ON u.id = d.user_id "
        "WHERE u.username = ? AND d.device_id = ?", (persona.user_id, device_id))
    assert len(rows) == 1, rows
    return rows[0][0], rows[0][1]


def enable(page: Page) -> None:
    control = page.locator("#notifications")
    expect(control).to_have_attribute("data-state", "off")
    page.click("#notifications-toggle")
    expect(control).to_have_attribute("data-state", "enabled")
    expect(page.locator("#notifications-toggle")).to_have_text("Disable notifications")


def wait_until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def go_offline(page: Page, web: QimDeployment, admin_token: str) -> None:
    """The page leaves the client for a same-origin JSON page (its socket closes, its service
    worker stays); done when the node holds no connection, so the next SEND finds the device
    offline and queues a push."""
    page.goto(f"{web.node.http_url}/api/v1/health")
    wait_until(lambda: api_ok(web.node, "GET", "node", admin_token)["connections"] == 0, "the browser's socket to close")


def deliver(context: BrowserContext, page: Page, base: str, data: str) -> None:
    """Hands `data` to the page's service worker as its push event, the way the browser's
    push service would (DevTools protocol ServiceWorker.deliverPushMessage)."""
    cdp = context.new_cdp_session(page)
    registrations: dict[str, str] = {}
    cdp.on("ServiceWorker.workerRegistrationUpdated", lambda event: registrations.update(
        {r["scopeURL"]: r["registrationId"] for r in event["registrations"] if not r["isDeleted"]}))
    cdp.send("ServiceWorker.enable")
    deadline = time.monotonic() + WAIT_S
    while f"{base}/" not in registrations:  # events arrive while Playwright waits, not in time.sleep
        assert time.monotonic() < deadline, f"no service worker registration over CDP: {registrations}"
        page.wait_for_timeout(50)
    cdp.send("ServiceWorker.deliverPushMessage", {"origin": base, "registrationId": registrations[f"{base}/"], "data": data})
    cdp.detach()


def notifications(page: Page, count: int) -> list[dict]:
    page.wait_for_function(f"({NOTIFICATIONS})().then((shown) => shown.length >= {count})", timeout=WAIT_S * 1000)
    return page.evaluate(NOTIFICATIONS)


def test_enable_notifications_then_an_offline_message_arrives_decrypted_and_is_shown(
    web: QimDeployment, browser: Browser, push: WebPushStandIn
) -> None:
    acme, base = web.tenants["acme"], web.node.http_url
    alice, bob = acme.persona("alice"), acme.persona("bob")
    group = group_of(bob, alice, title="lunch")
    with browser_with_push(browser, base, push.subscribe("alice-browser")) as (context, page):
        log_in(page, base, alice)
        device_id = page.evaluate("localStorage.getItem('qim.device_id')")
        enable(page)
        screenshot(page, "notifications")

        # The page subscribed with the server's key, for user-visible pushes only...
        made = json.loads(page.evaluate("localStorage.getItem('test.subscribed')"))
        server_key = api_ok(acme.node, "GET", "push/vapid-public-key", alice.token())["public_key"]
        assert made["userVisibleOnly"] is True and bytes(made["key"]) == b64url_decode(server_key)
        # ...and the server keeps that subscription for the browser's device.
        platform, token = stored_push(web, alice, device_id)
        assert platform == "web" and json.loads(token)["endpoint"].endswith("/push/alice-browser")

        go_offline(page, web, acme.admin_token)
        ack = send_as(bob, group, "text", {"text": "lunch at noon?"})[0]
        worker = json.loads(web.manage("qim_push_worker", "--once").strip().splitlines()[-1])
        assert worker["sent"] == 1 and worker["failed"] == 0, worker

        # What the push service received, decrypted with the browser's key.
        received = push.wait_received("alice-browser", 1)
        assert push.refusals == []
        payload = received[0].payload
        assert payload["conversation_id"] == group and payload["conversation_seq"] == ack["conversation_seq"]
        assert payload["sender_id"] == bob.user_id and payload["preview"] == "lunch at noon?"

        deliver(context, page, base, json.dumps(payload))
        shown = notifications(page, 1)
        assert [(n["title"], n["body"], n["tag"]) for n in shown] == [(bob.user_id, "lunch at noon?", f"conversation:{group}")]
        assert shown[0]["data"]["conversation_id"] == group

        # A click with no tab open opens this address (sw.js notificationclick): the conversation.
        page.goto(f"{base}/#conversation={group}")
        expect(page.locator("#conversation h2")).to_have_text("lunch")
        expect(page.locator("#messages .message .text")).to_have_text(["lunch at noon?"])


def test_a_call_push_rings_until_its_deadline_only(web: QimDeployment, browser: Browser, push: WebPushStandIn) -> None:
    """The service worker shows "Incoming call from X" for an invite still ringing, and
    nothing for one whose ring deadline has passed (the caller has stopped ringing)."""
    acme, base = web.tenants["acme"], web.node.http_url
    carol = acme.persona("carol")
    with browser_with_push(browser, base, push.subscribe("carol-browser")) as (context, page):
        log_in(page, base, carol)
        enable(page)
        now_ms = int(time.time() * 1000)
        late = {"type": "rtc.invite", "call_id": "late", "conversation_id": "c-late", "caller_id": "dave",
                "ring_deadline_ms": now_ms - 1000}
        live = {"type": "rtc.invite", "call_id": "live", "conversation_id": "c-live", "caller_id": "erin",
                "ring_deadline_ms": now_ms + 600_000}
        deliver(context, page, base, json.dumps(late))
        deliver(context, page, base, json.dumps(live))
        shown = notifications(page, 1)
        assert [(n["title"], n["tag"], n["data"]["call_id"]) for n in shown] == [
            ("Incoming call from erin", "call:c-live", "live")]


def test_disable_forgets_the_subscription_and_a_reload_keeps_the_state(
    web: QimDeployment, browser: Browser, push: WebPushStandIn
) -> None:
    acme, base = web.tenants["acme"], web.node.http_url
    dave = acme.persona("dave")
    with browser_with_push(browser, base, push.subscribe("dave-browser")) as (context, page):
        log_in(page, base, dave)
        device_id = page.evaluate("localStorage.getItem('qim.device_id')")
        enable(page)
        page.reload()  # the browser still holds the subscription: shown as on, registered again
        expect(page.locator("#notifications")).to_have_attribute("data-state", "enabled")
        assert stored_push(web, dave, device_id)[0] == "web"
        page.click("#notifications-toggle")
        expect(page.locator("#notifications")).to_have_attribute("data-state", "off")
        assert stored_push(web, dave, device_id) == ("", "")
        assert page.evaluate("localStorage.getItem('test.subscribed')") is None

        # Log out turns notifications off first: the next person at this browser gets none.
        enable(page)
        assert stored_push(web, dave, device_id)[0] == "web"
        page.click("#logout")
        expect(page.locator("#login")).to_be_visible()
        assert stored_push(web, dave, device_id) == ("", "")


def test_the_service_worker_is_served_from_the_root(web: QimDeployment) -> None:
    """At /sw.js (a worker's scope is at most its script's directory), as JavaScript, never
    cached stale; any other method is refused with {code, message}."""
    response = httpx.get(f"{web.node.http_url}/sw.js", timeout=WAIT_S)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/javascript")
    assert response.headers["service-worker-allowed"] == "/"
    assert response.headers["cache-control"] == "no-cache"
    assert "showNotification" in response.text
    refused = httpx.post(f"{web.node.http_url}/sw.js", timeout=WAIT_S)
    assert (refused.status_code, refused.json()["code"]) == (405, "method_not_allowed")


def test_a_browser_that_blocks_notifications_says_so_and_subscribes_nothing(
    web: QimDeployment, browser: Browser, push: WebPushStandIn
) -> None:
    """The site's notification permission set to "denied" (as a person would in the site's
    settings, here through the DevTools protocol): the control says blocked, offers no
    button, and the server keeps nothing for the device."""
    acme, base = web.tenants["acme"], web.node.http_url
    erin = acme.persona("erin")
    cdp = browser.new_browser_cdp_session()
    with browser_with_push(browser, base, push.subscribe("erin-browser")) as (context, page):
        context.clear_permissions()
        page.goto(f"{base}/api/v1/health")
        target = cdp.send("Target.getTargets")["targetInfos"]
        contexts = {t["browserContextId"] for t in target if t["type"] == "page" and t["url"].startswith(base)}
        assert len(contexts) == 1, target
        cdp.send("Browser.setPermission", {"permission": {"name": "notifications"}, "setting": "denied",
                                           "origin": base, "browserContextId": contexts.pop()})
        log_in(page, base, erin)
        device_id = page.evaluate("localStorage.getItem('qim.device_id')")
        expect(page.locator("#notifications")).to_have_attribute("data-state", "blocked")
        expect(page.locator("#notifications-toggle")).to_be_hidden()
        assert page.evaluate("Notification.permission") == "denied"
        assert stored_push(web, erin, device_id) == ("", "")
    cdp.detach()


def test_a_server_without_web_push_and_a_browser_without_the_push_api_say_so(
    web: QimDeployment, browser: Browser, push: WebPushStandIn, sqlite_template: Path, work_dir: Path
) -> None:
    """Enable on a server with no VAPID key: "not configured", without asking the browser's
    permission. A browser with no Push API: "unsupported", and no button."""
    bare = start_embedded(sqlite_template, work_dir, extra_env={"QIM_ALLOWED_ORIGINS": "*"})
    try:
        frank = bare.tenants["acme"].persona("frank")
        with browser_with_push(browser, bare.node.http_url, push.subscribe("frank-browser")) as (context, page):
            # No permission granted: had the page asked first, the unanswered prompt would have
            # left it "off" (or "blocked"); "not configured" shows the key was checked first.
            context.clear_permissions()
            log_in(page, bare.node.http_url, frank)
            page.click("#notifications-toggle")
            expect(page.locator("#notifications")).to_have_attribute("data-state", "unconfigured")
            expect(page.locator("#notifications-state")).to_have_text("Notifications are not configured on this server")
    finally:
        bare.stop()
    gina = web.tenants["acme"].persona("gina")
    with browser_with_push(browser, web.node.http_url, push.subscribe("gina-browser")) as (context, page):
        context.add_init_script("delete window.PushManager;")
        log_in(page, web.node.http_url, gina)
        expect(page.locator("#notifications")).to_have_attribute("data-state", "unsupported")
        expect(page.locator("#notifications-toggle")).to_be_hidden()
