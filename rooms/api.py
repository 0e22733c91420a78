"""rooms over REST (protocol.md §3): create, read with online_count, promote."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from qim.api.permissions import IsTenantAdmin
from rooms.actions import do_create_room, do_promote_room
from rooms.ring import make_room_seq
from rooms.queries import access_room
from rooms.service import get_room_service, room_key


class CreateRoomSerializer(serializers.Serializer):
    room_id = serializers.RegexField(r"^[a-z0-9_-]{1,64}$")
    title = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class PromoteSerializer(serializers.Serializer):
    member_user_ids = serializers.ListField(child=serializers.CharField(max_length=64), required=False, max_length=10000)


class RoomsView(APIView):
    @extend_schema(request=CreateRoomSerializer, responses={201: dict})
    def post(self, request: Request) -> Response:
        body = CreateRoomSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        room = do_create_room(request.user, body.validated_data["room_id"], body.validated_data["title"])
        return Response({"room_id": room.room_id}, status=status.HTTP_201_CREATED)


async def writer_info(key: str) -> dict | None:
    return await get_room_service().call_writer(key, "room.info", {}, acquire=False)


async def online_users(key: str) -> list[str]:
    """Everyone connected to the room now, asked of each node that has members."""
    service = get_room_service()
    info = await service.call_writer(key, "room.info", {}, acquire=False)
    users: set[str] = set()
    for node_id in (info or {}).get("nodes", []):
        answer = await service.node.call(node_id, "room.users", {"key": key}, timeout=2.0)
        users.update(answer["user_ids"])
    return sorted(users)


class RoomView(APIView):
    @extend_schema(responses={200: dict})
    def get(self, request: Request, room_id: str) -> Response:
        room = access_room(request.user.tenant_id, room_id)
        info = async_to_sync(writer_info)(room_key(room.tenant_id, room.room_id))
        if info is None:
            # No writer now: nobody is in the room, and the next writer starts a new epoch.
            info = {"online_count": 0, "room_epoch": room.room_epoch, "latest_room_seq": make_room_seq(room.room_epoch, 0)}
        return Response({
            "room_id": room.room_id,
            "title": room.title,
            "online_count": info["online_count"],
            "room_epoch": info["room_epoch"],
            "latest_room_seq": info["latest_room_seq"],
            "promoted_to": room.promoted_to_id,
        })


class PromoteView(APIView):
    permission_classes = [IsTenantAdmin]

    @extend_schema(request=PromoteSerializer, responses={201: dict})
    def post(self, request: Request, room_id: str) -> Response:
        body = PromoteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        room = access_room(request.user.tenant_id, room_id)
        user_ids = body.validated_data.get("member_user_ids")
        if user_ids is None:
            user_ids = async_to_sync(online_users)(room_key(room.tenant_id, room.room_id))
        conversation = do_promote_room(room, user_ids)
        return Response({"conversation_id": conversation.pk}, status=status.HTTP_201_CREATED)
