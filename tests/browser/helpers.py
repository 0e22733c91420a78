"""What the browser tests do in the web client, in a person's steps."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from playwright.sync_api import Browser, Page

from tests.browser.conftest import new_context
from tests.harness.personas import PASSWORD, Persona, api_ok


def log_in(page: Page, base_url: str, persona: Persona) -> None:
    """The login form, as a person fills it; done when the conversation list is there."""
    page.goto(f"{base_url}/")
    page.fill("input[name=tenant]", persona.tenant.name)
    page.fill("input[name=username]", persona.user_id)
    page.fill("input[name=password]", PASSWORD)
    page.click("#login button[type=submit]")
    page.wait_for_selector("#connection:text('online')")


@contextmanager
def signed_in(browser: Browser, base_url: str, *personas: Persona) -> Iterator[list[Page]]:
    """A browser context per persona, each logged in to the web client; on leaving, the
    contexts close and none of them may have sent a request past 127.0.0.1."""
    contexts = [new_context(browser) for _ in personas]
    pages = [context.new_page() for context, _ in contexts]
    for page, persona in zip(pages, personas):
        log_in(page, base_url, persona)
    yield pages
    foreign = [log.foreign() for _, log in contexts]
    for context, _ in contexts:
        context.close()
    assert foreign == [[] for _ in contexts], foreign


def group_of(creator: Persona, *members: Persona, title: str) -> str:
    """A group made over REST by `creator` with `members`; its conversation_id."""
    return api_ok(creator.tenant.node, "POST", "conversations", creator.token(), json={
        "kind": "group", "title": title, "member_user_ids": [m.user_id for m in members],
    })["conversation_id"]


def open_conversation(page: Page, conversation_id: str) -> None:
    page.click(f".conversation-item[data-id='{conversation_id}']")
    page.wait_for_selector("#composer")


def message(page: Page, seq: int):  # type: ignore[no-untyped-def]
    return page.locator(f"#messages .message[data-seq='{seq}']")


def send_as(persona: Persona, conversation_id: str, content_type: str, *payloads: Any, **fields: Any) -> list[dict]:
    """SENDs from the persona's own (Python SDK) device, outside the browser; their ACKs.
    `fields` go into every SEND (e.g. `mentions`)."""

    async def run() -> list[dict]:
        client = await persona.connect(device_id="script")
        try:
            return [await client.request("SEND", conversation_id=conversation_id, client_msg_id=uuid.uuid4().hex,
                                         content_type=content_type, payload=payload, **fields) for payload in payloads]
        finally:
            await client.close()
            persona.tenant.clients.remove(client)

    # Playwright's sync API keeps an event loop running on this thread: use another one.
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, run()).result(timeout=300)


def call(page: Page, user_id: str) -> None:
    page.fill("#callee", user_id)
    page.click("#call-form button[type=submit]")


def call_panel(page: Page):  # type: ignore[no-untyped-def]
    return page.locator("#call-panel")
