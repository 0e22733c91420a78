"""In-process (pytest-django) personas for action tests: a tenant, alice and bob, a group."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count

from qim.actions.accounts import do_bootstrap_tenant, do_create_user
from qim.actions.conversations import do_create_conversation
from qim.actions.messages import do_send_message
from qim.content_types import TEXT, builtin_policy
from qim.infra import codec
from qim.models import Conversation, Tenant, User

_client_msg = count(1)


@dataclass
class Cast:
    tenant: Tenant
    admin: User
    alice: User
    bob: User
    group: Conversation


def make_cast(tenant_name: str = "acme") -> Cast:
    boot = do_bootstrap_tenant(tenant_name, "admin", "pw")
    alice = do_create_user(boot.tenant, "alice", "pw")
    bob = do_create_user(boot.tenant, "bob", "pw")
    group, _ = do_create_conversation(alice, kind="group", title="team", member_user_ids=["bob"], e2ee=False)
    return Cast(boot.tenant, boot.admin, alice, bob, group)


def send_text(sender: User, conversation: Conversation, text: str) -> int:
    ack = do_send_message(
        sender, "phone", conversation.pk, f"in-process-{next(_client_msg)}", builtin_policy(TEXT),
        codec.encode({"text": text}),
    )
    return ack.conversation_seq
