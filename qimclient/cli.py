"""`python -m qimclient`: log in, tail a session, send or edit a message, send any request
frame, run a group (roles, policies, your tier)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from .cli_group import add_group_parser
from .cli_text import event_line
from .connection import QimClient
from .cursor import JsonFileCursorStore
from .errors import ApiError, AuthError, ConnectionLost, QimError
from .rest import login
from .urls import websocket_url

DEFAULT_URL = "http://127.0.0.1:8000"


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree; kept separate from `main` so tests and docs can inspect it."""
    parser = argparse.ArgumentParser(prog="python -m qimclient", description="QIM command-line client.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log connection events to stderr")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    login_parser = commands.add_parser("login", help="get a token for a device; prints {token, user_id}")
    login_parser.add_argument("--url", default=DEFAULT_URL, help=f"server base URL (default {DEFAULT_URL})")
    login_parser.add_argument("--tenant", required=True)
    login_parser.add_argument("--username", required=True)
    login_parser.add_argument("--password", required=True)
    login_parser.add_argument("--device-id", required=True, help="the device the token is bound to")
    login_parser.set_defaults(run=_run_login)

    tail_parser = commands.add_parser(
        "tail", help="print AUTH_OK, the synced mailbox events, then every received frame as a JSON line"
    )
    _add_session_arguments(tail_parser)
    tail_parser.add_argument(
        "--cursor-file", help="keep the mailbox cursor in this JSON file, so the next tail resumes after it"
    )
    tail_parser.add_argument(
        "--no-sync", action="store_true", help="no SYNC catch-up: print raw frames only, EVENT pushes as they come"
    )
    tail_parser.add_argument(
        "--format", choices=("json", "text"), default="json",
        help="text: one readable line per event, mentions and replies spelled out (other frames stay JSON)",
    )
    tail_parser.set_defaults(run=_run_tail)

    _add_send_parser(commands)
    _add_edit_parser(commands)

    frame_parser = commands.add_parser("frame", help="send any frame (req_id added) and print the reply")
    _add_session_arguments(frame_parser)
    frame_parser.add_argument("frame", help='JSON object, e.g. \'{"type":"PRESENCE_SUB","user_ids":["bob"]}\'')
    frame_parser.add_argument(
        "--no-wait", action="store_true", help="send the frame as is and exit without waiting (e.g. TYPING)"
    )
    frame_parser.set_defaults(run=_run_frame)
    add_group_parser(commands, DEFAULT_URL)
    return parser


def _add_send_parser(commands: Any) -> None:
    """`send`, with protocol §17's mentions, @all and reply."""
    send_parser = commands.add_parser("send", help="SEND a message to a conversation and print the reply")
    _add_session_arguments(send_parser)
    send_parser.add_argument("--conversation", required=True, help="conversation_id")
    body = send_parser.add_mutually_exclusive_group(required=True)
    body.add_argument("--text", help="send content_type text with payload {text}")
    body.add_argument("--payload", help="raw JSON payload, for --content-type other than text")
    send_parser.add_argument("--content-type", default="text", help="text (default) or a registered custom_type")
    send_parser.add_argument("--mention", action="append", metavar="USER_ID", help="mention a member (repeatable)")
    send_parser.add_argument("--mention-all", action="store_true", help="@all (as the group's policy allows)")
    send_parser.add_argument("--reply-to", type=int, metavar="SEQ", help="the conversation_seq this replies to")
    send_parser.set_defaults(run=_run_send)


def _add_edit_parser(commands: Any) -> None:
    """`edit`: a new payload, and new mentions or @all when given (§8, §17.2)."""
    edit_parser = commands.add_parser("edit", help="EDIT one of your messages and print the reply")
    _add_session_arguments(edit_parser)
    edit_parser.add_argument("--conversation", required=True, help="conversation_id")
    edit_parser.add_argument("--seq", type=int, required=True, help="the message's conversation_seq")
    new_body = edit_parser.add_mutually_exclusive_group(required=True)
    new_body.add_argument("--text", help="the new payload {text}")
    new_body.add_argument("--payload", help="the new raw JSON payload")
    mentions = edit_parser.add_mutually_exclusive_group()
    mentions.add_argument("--mention", action="append", metavar="USER_ID", help="the new mentions (repeatable)")
    mentions.add_argument("--no-mentions", action="store_true", help="mention nobody by name any more")
    edit_parser.add_argument(
        "--mention-all", action=argparse.BooleanOptionalAction, help="set or clear @all (default: as it was)"
    )
    edit_parser.set_defaults(run=_run_edit)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status (1 for a refused request, 2 for a refused AUTH)."""
    arguments = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if arguments.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return asyncio.run(arguments.run(arguments))
    except KeyboardInterrupt:
        return 130
    except QimError as error:
        _print_line(error.frame or {"type": "ERROR", "code": error.code, "message": error.message})
        return 1
    except AuthError as error:
        print(f"AUTH refused: {error}", file=sys.stderr)
        return 2
    except (ApiError, ConnectionLost, TimeoutError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def _add_session_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", default=DEFAULT_URL, help=f"server base URL; ws(s)://.../ws/v1 is derived (default {DEFAULT_URL})"
    )
    parser.add_argument("--token", required=True)
    parser.add_argument("--device-id", required=True, help="must be the device the token was issued for")
    parser.add_argument("--origin", help="Origin header to send (browsers always send one; default none)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for AUTH_OK and replies")


def _client(arguments: argparse.Namespace, *, reconnect: bool, sync: bool = False, **options: Any) -> QimClient:
    return QimClient(
        websocket_url(arguments.url),
        arguments.token,
        arguments.device_id,
        request_timeout=arguments.timeout,
        reconnect=reconnect,
        origin=arguments.origin,
        sync=sync,
        **options,
    )


def _print_line(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False), flush=True)


async def _run_login(arguments: argparse.Namespace) -> int:
    token, user_id = await login(
        arguments.url, arguments.tenant, arguments.username, arguments.password, arguments.device_id
    )
    _print_line({"token": token, "user_id": user_id})
    return 0


async def _run_tail(arguments: argparse.Namespace) -> int:
    sync = not arguments.no_sync
    store = JsonFileCursorStore(arguments.cursor_file) if arguments.cursor_file else None
    # Events are printed by the callback, so none need queueing for next_event.
    options = {"cursor_store": store, "max_queued_events": 0} if sync else {}
    client = _client(arguments, reconnect=True, sync=sync, **options)
    text = arguments.format == "text"

    def show_event(event: dict[str, Any]) -> None:
        if text:
            print(event_line(event, client.user_id), flush=True)
        else:  # the same line shape as a raw EVENT push, but each event once, in mailbox_seq order
            _print_line({"type": "EVENT", "event": event})

    if sync:
        client.on_event(show_event)
    _print_line(await client.connect())

    async def announce_reconnect(reconnected: QimClient) -> None:
        _print_line(reconnected.auth_ok)

    client.on_reconnect.append(announce_reconnect)
    try:
        while not client.is_closed:
            try:
                frame = await client.next_push(timeout=1.0)
            except TimeoutError:
                continue
            if frame.get("type") != "EVENT" or not (sync or text):
                _print_line(frame)  # EVENTs too without sync: as the server sent them
            elif not sync:
                print(event_line(frame.get("event") or {}, client.user_id), flush=True)
        print(f"connection closed for good: {client.last_error or client.close_code}", file=sys.stderr)
        return 1
    finally:
        await client.close()


async def _run_send(arguments: argparse.Namespace) -> int:
    payload = {"text": arguments.text} if arguments.text is not None else json.loads(arguments.payload)
    async with _client(arguments, reconnect=False) as client:
        reply = await client.send_message(
            arguments.conversation, arguments.content_type, payload,
            mentions=arguments.mention, mention_all=arguments.mention_all, reply_to=arguments.reply_to,
        )
    _print_line(reply)
    return 0


async def _run_edit(arguments: argparse.Namespace) -> int:
    payload = {"text": arguments.text} if arguments.text is not None else json.loads(arguments.payload)
    mentions = [] if arguments.no_mentions else arguments.mention
    async with _client(arguments, reconnect=False) as client:
        reply = await client.edit_message(
            arguments.conversation, arguments.seq, payload, mentions=mentions, mention_all=arguments.mention_all,
        )
    _print_line(reply)
    return 0


async def _run_frame(arguments: argparse.Namespace) -> int:
    frame = json.loads(arguments.frame)
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise ValueError('the frame must be a JSON object with a string "type"')
    async with _client(arguments, reconnect=False) as client:
        if arguments.no_wait:
            await client.send_frame(frame)
            return 0
        reply = await client.request_frame(frame)
    _print_line(reply)
    return 0
