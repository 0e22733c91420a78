"""`python -m qimclient group ...`: a group's settings, members, roles and your tier over REST
(protocol §17), each answer printed as a JSON line."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .rest import RestClient


def add_group_parser(commands: Any, default_url: str) -> None:
    """The `group` command and its actions, under the CLI's subcommands."""
    parser = commands.add_parser("group", help="a group's settings, members, roles and your tier (REST)")
    parser.add_argument("--url", default=default_url, help=f"server base URL (default {default_url})")
    parser.add_argument("--token", required=True)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each answer")
    parser.add_argument("--conversation", required=True, help="conversation_id")
    actions = parser.add_subparsers(dest="group_action", required=True, metavar="ACTION")
    actions.add_parser("show", help="its settings, with your role and tier")
    members = actions.add_parser("members", help="every current member and their role, a line each")
    members.add_argument("--page-size", type=int, help="members per request (server default 100)")
    role = actions.add_parser("role", help="make a member owner, admin or member (the owner only)")
    role.add_argument("user_id")
    role.add_argument("role", help="owner (hands ownership over), admin or member")
    tier = actions.add_parser("tier", help="your own mailbox tier: full or mention_only")
    tier.add_argument("user_id", help="your own user id")
    tier.add_argument("tier", help="full or mention_only")
    update = actions.add_parser("update", help="rename the group or set its policies (owner and admins)")
    update.add_argument("--title")
    update.add_argument("--mention-all-policy", help="who may @all: admins or members")
    update.add_argument("--add-members-policy", help="who may add members: admins or members")
    parser.set_defaults(run=run_group)


async def run_group(arguments: argparse.Namespace) -> int:
    conversation = arguments.conversation
    async with RestClient(arguments.url, arguments.token, timeout=arguments.timeout) as api:
        action = arguments.group_action
        if action == "members":
            for member in await api.list_members(conversation, page_size=arguments.page_size):
                _print_line(member)
            return 0
        if action == "show":
            answer = await api.get_conversation(conversation)
        elif action == "role":
            answer = await api.set_member_role(conversation, arguments.user_id, arguments.role)
        elif action == "tier":
            answer = await api.set_tier(conversation, arguments.user_id, arguments.tier)
        else:
            answer = await api.update_conversation(
                conversation, title=arguments.title, mention_all_policy=arguments.mention_all_policy,
                add_members_policy=arguments.add_members_policy,
            )
    _print_line(answer)
    return 0


def _print_line(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False), flush=True)
