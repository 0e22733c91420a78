"""What the browser tests do in the web client, in a person's steps."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from playwright.sync_api import Page

from tests.harness.personas import PASSWORD, Persona


def log_in(page: Page, base_url: str, persona: Persona) -> None:
    """The login form, as a person fills it; done when the conversation list is there."""
    page.goto(f"{base_url}/")
    page.fill("input[name=tenant]", persona.tenant.name)
    page.fill("input[name=username]", persona.user_id)
    page.fill("input[name=password]", PASSWORD)
    page.click("#login button[type=submit]")
    page.wait_for_selector("#connection:text('online')")


def open_conversation(page: Page, conversation_id: str) -> None:
    page.click(f".conversation-item[data-id='{conversation_id}']")
    page.wait_for_selector("#composer")


def message(page: Page, seq: int):  # type: ignore[no-untyped-def]
    return page.locator(f"#messages .message[data-seq='{seq}']")


def send_as(persona: Persona, conversation_id: str, content_type: str, *payloads: Any) -> list[dict]:
    """SENDs from the persona's own (Python SDK) device, outside the browser; their ACKs."""

    async def run() -> list[dict]:
        client = await persona.connect(device_id="script")
        try:
            return [await client.request("SEND", conversation_id=conversation_id, client_msg_id=uuid.uuid4().hex,
                                         content_type=content_type, payload=payload) for payload in payloads]
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
