"""Core REST views: parse, call one action, answer (protocol.md §3). Refusals raised by
actions (qim.errors.Refused) become `{code, message}` in qim.api.errors."""

from __future__ import annotations

from django.db import transaction
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from qim.actions.accounts import do_clear_push_credentials, do_create_user, do_login, do_set_push_credentials
from qim.actions.conversations import do_add_members, do_create_conversation, do_remove_member
from qim.actions.groups import do_set_role, do_set_tier, do_update_group
from qim.actions.credentials import check_deactivate_user, do_revoke_token
from qim.clock import now_ms
from qim.node.connection_node import get_node
from qim.api.login_throttle import check_login_rate
from qim.moderation import ModerationService, Moderator
from qim.api.permissions import IsTenantAdmin
from qim.push.web_subscription import canonical_subscription
from qim.errors import Refused
from qim.queries.conversations import access_conversation
from qim.queries.groups import conversation_settings, member_page
from qim.queries.identity import token_expires_at_ms
from qim.api.serializers import (
    AddMembersSerializer,
    ConversationIdSerializer,
    ConversationSeqSerializer,
    ConversationSettingsSerializer,
    MemberChangeSerializer,
    MemberPageSerializer,
    UpdateConversationSerializer,
    UpdateMemberSerializer,
    CreateConversationSerializer,
    CreateUserSerializer,
    EventSeqSerializer,
    ModerationRecallSerializer,
    PushCredentialsSerializer,
    TokenRequestSerializer,
    TokenResponseSerializer,
    UserIdSerializer,
)


def valid(serializer_class, request: Request) -> dict:  # type: ignore[no-untyped-def]
    body = serializer_class(data=request.data)
    body.is_valid(raise_exception=True)
    return body.validated_data


def device_of(request: Request) -> str:
    """The device the calling token was issued for (REST calls act as that device)."""
    return request.auth.device.device_id


class AuthTokenView(APIView):
    """Log a device in (POST: password -> a new token, throttled), or out (DELETE: the
    calling token is revoked)."""

    def _logging_out(self) -> bool:
        # The schema generator builds this view without a request.
        return getattr(self.request, "method", None) == "DELETE"

    def get_authenticators(self):  # type: ignore[no-untyped-def]
        # Logging in takes no token: a stale one in the header must not refuse the login.
        return super().get_authenticators() if self._logging_out() else []

    def get_permissions(self):  # type: ignore[no-untyped-def]
        return [IsAuthenticated()] if self._logging_out() else [AllowAny()]

    @extend_schema(request=TokenRequestSerializer, responses=TokenResponseSerializer)
    def post(self, request: Request) -> Response:
        data = valid(TokenRequestSerializer, request)
        check_login_rate(data["tenant"], data["username"], request.META.get("REMOTE_ADDR", ""))
        token, user = do_login(data["tenant"], data["username"], data["password"], data["device_id"])
        return Response({"token": token, "user_id": user.username, "expires_at_ms": token_expires_at_ms(now_ms())})

    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request) -> Response:
        do_revoke_token(request.auth)
        return Response(status=status.HTTP_204_NO_CONTENT)


class UsersView(APIView):
    """Tenant admins create users of their own tenant."""

    permission_classes = [IsTenantAdmin]

    @extend_schema(request=CreateUserSerializer, responses={201: UserIdSerializer})
    def post(self, request: Request) -> Response:
        data = valid(CreateUserSerializer, request)
        user = do_create_user(
            request.user.tenant, data["username"], data["password"], display_name=data.get("display_name", "")
        )
        return Response({"user_id": user.username}, status=status.HTTP_201_CREATED)


class UserDeactivateView(APIView):
    """A tenant admin deactivates a user: their tokens are revoked and their sockets closed
    on every node (4403); they cannot log in again."""

    permission_classes = [IsTenantAdmin]

    @extend_schema(request=None, responses={200: dict})
    def post(self, request: Request, user_id: str) -> Response:
        revoked = check_deactivate_user(request.user, user_id)
        return Response({"user_id": user_id, "is_active": False, "tokens_revoked": revoked})


class ConversationsView(APIView):
    """Create a group, or find-or-create a direct conversation (200 when it existed)."""

    @extend_schema(request=CreateConversationSerializer, responses={201: ConversationIdSerializer, 200: ConversationIdSerializer})
    def post(self, request: Request) -> Response:
        data = valid(CreateConversationSerializer, request)
        conversation, created = do_create_conversation(
            request.user, kind=data["kind"], title=data["title"],
            member_user_ids=data["member_user_ids"], e2ee=data["e2ee"],
        )
        return Response(
            {"conversation_id": conversation.pk},
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class MembersView(APIView):
    """Members add members; answers the seq of the qim.membership.v1 join event."""

    @extend_schema(request=AddMembersSerializer, responses={201: ConversationSeqSerializer})
    def post(self, request: Request, conversation_id: str) -> Response:
        data = valid(AddMembersSerializer, request)
        access_conversation(request.user.tenant_id, conversation_id)
        seq = do_add_members(conversation_id, request.user, device_of(request), data["user_ids"])
        return Response({"conversation_seq": seq}, status=status.HTTP_201_CREATED)


class MemberView(APIView):
    """Leave (yourself) or remove (the group's owner or admins, a tenant admin); answers the
    event's seq. PATCH: a member's `role` (the owner) or your own `tier`."""

    @extend_schema(responses={200: ConversationSeqSerializer})
    def delete(self, request: Request, conversation_id: str, user_id: str) -> Response:
        access_conversation(request.user.tenant_id, conversation_id)
        seq = do_remove_member(conversation_id, request.user, device_of(request), user_id)
        return Response({"conversation_seq": seq})

    @extend_schema(request=UpdateMemberSerializer, responses={200: MemberChangeSerializer})
    def patch(self, request: Request, conversation_id: str, user_id: str) -> Response:
        data = valid(UpdateMemberSerializer, request)
        access_conversation(request.user.tenant_id, conversation_id)
        answer: dict = {"user_id": user_id}
        # Both or neither: a role given while the tier is refused (or the reverse) must not
        # stay written, nor its event leave (a refused request writes nothing, §4).
        with transaction.atomic():
            if "role" in data:
                answer.update(do_set_role(conversation_id, request.user, device_of(request), user_id, data["role"]))
            if "tier" in data:
                answer.update(do_set_tier(conversation_id, request.user, user_id, data["tier"]))
        return Response(answer)


class ConversationView(APIView):
    """GET: a conversation's settings and your role and tier in it; PATCH: rename a group or
    set its policies (owner and admins), answering the settings and the event's seq."""

    @extend_schema(responses={200: ConversationSettingsSerializer})
    def get(self, request: Request, conversation_id: str) -> Response:
        conversation = access_conversation(request.user.tenant_id, conversation_id)
        return Response(conversation_settings(conversation, request.user.pk))

    @extend_schema(request=UpdateConversationSerializer, responses={200: ConversationSettingsSerializer})
    def patch(self, request: Request, conversation_id: str) -> Response:
        data = valid(UpdateConversationSerializer, request)
        access_conversation(request.user.tenant_id, conversation_id)
        return Response(do_update_group(conversation_id, request.user, device_of(request), data))


class MemberListView(MembersView):
    """GET: the current members, by user id, a page at a time (`after`, `limit` up to 1 000)."""

    @extend_schema(
        parameters=[OpenApiParameter("after", str), OpenApiParameter("limit", int)],
        responses={200: MemberPageSerializer},
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        conversation = access_conversation(request.user.tenant_id, conversation_id)
        limit = _int_param(request, "limit", default=100, lowest=1, highest=1000)
        return Response(member_page(conversation, request.user.pk, after=request.query_params.get("after"), limit=limit))


def _int_param(request: Request, name: str, *, default: int, lowest: int, highest: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Refused("bad_request", f"{name} is a whole number") from None
    return max(lowest, min(highest, value))


class DevicePushView(APIView):
    """Register (POST) or forget (DELETE) the push credentials of one of the caller's own
    devices."""

    @extend_schema(request=PushCredentialsSerializer, responses={200: dict})
    def post(self, request: Request, device_id: str) -> Response:
        data = valid(PushCredentialsSerializer, request)
        push_token = data["push_token"]
        if data["platform"] == "web":
            push_token = canonical_subscription(data["subscription"])
        do_set_push_credentials(request.user, device_id, data["platform"], push_token, data["voip_token"])
        return Response({"device_id": device_id, "platform": data["platform"]})

    @extend_schema(responses={204: None})
    def delete(self, request: Request, device_id: str) -> Response:
        do_clear_push_credentials(request.user, device_id)
        return Response(status=204)


class ModerationRecallView(APIView):
    """A tenant admin recalls any message of the tenant, with no time window; audited. 201
    with the new qim.recall.v1 event's seq, 200 with the earlier one if already recalled."""

    permission_classes = [IsTenantAdmin]
    moderation = ModerationService()

    @extend_schema(request=ModerationRecallSerializer, responses={201: EventSeqSerializer, 200: EventSeqSerializer})
    def post(self, request: Request) -> Response:
        data = valid(ModerationRecallSerializer, request)
        access_conversation(request.user.tenant_id, data["conversation_id"])
        result = self.moderation.recall(
            Moderator.tenant_admin(request.user, device_of(request)),
            data["conversation_id"], data["conversation_seq"], reason=data["reason"],
        )
        return Response(
            {"event_conversation_seq": result.event_conversation_seq},
            status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK,
        )


class HealthView(APIView):
    """Liveness for load balancers and test harnesses: answers without touching the database."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(responses={200: dict})
    def get(self, request: Request) -> Response:
        return Response({"status": "ok", "node_id": get_node().node_id})


class NodeStatsView(APIView):
    """This node's connection counts and fan-out counters (no tenant data), for operators."""

    permission_classes = [IsTenantAdmin]

    @extend_schema(responses={200: dict})
    def get(self, request: Request) -> Response:
        return Response(get_node().stats())
