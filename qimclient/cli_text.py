"""`tail --format text`: one readable line per mailbox event, mentions and replies spelled out."""

from __future__ import annotations

import json
from typing import Any

from .sync import MailboxEvent, is_live_event

# A quoted message's preview is cut to this many characters in a reply's line.
QUOTE_CHARS = 40


def event_line(event: MailboxEvent, me: str | None = None) -> str:
    """`#12 <conversation> #5 bob (re #3 alice: "lunch?"): sure @alice <- mentions you`; a live
    event (§6.5) starts with `live` instead of its mailbox_seq, a control event shows its type,
    actor and payload."""
    where = "live" if is_live_event(event) else f"#{event.get('mailbox_seq')}"
    head = f"{where} {event.get('conversation_id')}"
    message, control = event.get("message"), event.get("control")
    if event.get("kind") == "message" and isinstance(message, dict):
        return f"{head} {message_line(message, me)}"
    if isinstance(control, dict):
        seq = control.get("conversation_seq") or control.get("target_conversation_seq")
        payload = json.dumps(control.get("payload"), ensure_ascii=False, separators=(",", ":"))
        return f"{head} #{seq} {control.get('actor_id')} {control.get('custom_type')} {payload}"
    return f"{head} {event.get('kind')}"


def message_line(message: dict[str, Any], me: str | None = None) -> str:
    """One message object: seq, sender, what it quotes, its text, whom it mentions."""
    render = message.get("render")
    text = render.get("text") if isinstance(render, dict) else None
    line = f"#{message.get('conversation_seq')} {message.get('sender_id')}"
    quoted = message.get("reply_to")
    if isinstance(quoted, dict):
        line += f" (re {quote_text(quoted)})"
    line += f": {text if text is not None else message.get('preview', '')}"
    mentions = [m for m in message.get("mentions") or [] if isinstance(m, str)]
    names = [f"@{m}" for m in mentions] + (["@all"] if message.get("mention_all") is True else [])
    if names:
        line += f" [{' '.join(names)}]"
    if me is not None and message.get("sender_id") != me and (me in mentions or message.get("mention_all") is True):
        line += " <- mentions you"
    return line


def quote_text(quoted: dict[str, Any]) -> str:
    """A reply's quoted message as `#3 alice: "lunch?"` (§17.3: as it is now, so a recalled
    one reads `[recalled]`)."""
    preview = str(quoted.get("preview") or "")
    if len(preview) > QUOTE_CHARS:
        preview = preview[: QUOTE_CHARS - 1] + "…"
    sender = quoted.get("sender_id") or "?"
    state = quoted.get("state")
    gone = f" ({state})" if state in ("recalled", "deleted") and not preview.startswith("[") else ""
    return f'#{quoted.get("conversation_seq")} {sender}: "{preview}"{gone}'
