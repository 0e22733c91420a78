"""Core REST views: parse, call one action, answer (protocol.md §3)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from qim.actions.accounts import AccountError, do_create_user, do_login
from qim.api_errors import ApiError
from qim.gateway.node import get_node
from qim.permissions import IsTenantAdmin
from qim.serializers import (
    CreateUserResponseSerializer,
    CreateUserSerializer,
    TokenRequestSerializer,
    TokenResponseSerializer,
)

_STATUS_BY_CODE = {"unauthenticated": 401, "conflict": 409, "forbidden": 403, "not_found": 404}


def api_error(exc: AccountError) -> ApiError:
    return ApiError(exc.code, exc.message, _STATUS_BY_CODE.get(exc.code, 400))


class AuthTokenView(APIView):
    """Log a device in: password -> the device's token."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=TokenRequestSerializer, responses=TokenResponseSerializer)
    def post(self, request: Request) -> Response:
        body = TokenRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            token, user = do_login(data["tenant"], data["username"], data["password"], data["device_id"])
        except AccountError as exc:
            raise api_error(exc) from None
        return Response({"token": token, "user_id": user.username})


class UsersView(APIView):
    """Tenant admins create users of their own tenant."""

    permission_classes = [IsTenantAdmin]

    @extend_schema(request=CreateUserSerializer, responses={201: CreateUserResponseSerializer})
    def post(self, request: Request) -> Response:
        body = CreateUserSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            user = do_create_user(
                request.user.tenant,
                data["username"],
                data["password"],
                display_name=data.get("display_name", ""),
            )
        except AccountError as exc:
            raise api_error(exc) from None
        return Response({"user_id": user.username}, status=status.HTTP_201_CREATED)


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
