"""registry/types over REST (protocol.md §3, §6): users read, tenant admins write.

The list is a JSON array; its ETag (and X-Registry-Version) carry the tenant's
registry_version, and a matching If-None-Match answers 304, so clients poll for the price of
one header.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from qim.errors import Refused
from qim.api.permissions import Authenticated
from registry.actions import InvalidType, do_create_type, do_disable_type, do_update_type
from registry.models import CustomMessageType
from registry.serializers import CustomMessageTypeSerializer


class ReadOrTenantAdmin(Authenticated):
    message = "tenant admins only"

    def has_permission(self, request, view) -> bool:  # type: ignore[no-untyped-def]
        if not super().has_permission(request, view):
            return False
        return request.method in SAFE_METHODS or bool(request.user.is_tenant_admin)


def actor_of(request: Request) -> str:
    return f"{request.user.tenant.name}:{request.user.username}"


def etag(version: int) -> str:
    return f'"registry-{version}"'


def validated(request: Request, *, partial: bool, instance: CustomMessageType | None = None) -> dict:
    body = CustomMessageTypeSerializer(instance, data=request.data, partial=partial)
    body.is_valid(raise_exception=True)
    return body.validated_data


def answer(row: CustomMessageType, status_code: int = status.HTTP_200_OK) -> Response:
    return Response(CustomMessageTypeSerializer(row).data, status=status_code)


def field_errors(exc: InvalidType) -> Response:
    return Response(
        {"code": "bad_request", "message": exc.message, "fields": exc.errors}, status=status.HTTP_400_BAD_REQUEST
    )


class TypesView(APIView):
    permission_classes = [ReadOrTenantAdmin]

    @extend_schema(
        parameters=[
            OpenApiParameter("since_version", int, description="only types changed after this version"),
            OpenApiParameter(
                "If-None-Match", str, OpenApiParameter.HEADER, description="a previous answer's ETag: 304 if unchanged"
            ),
        ],
        responses={200: CustomMessageTypeSerializer(many=True), 304: None},
    )
    def get(self, request: Request) -> Response:
        tenant = request.user.tenant
        tenant.refresh_from_db(fields=["registry_version"])
        tag = etag(tenant.registry_version)
        if request.headers.get("If-None-Match") == tag:
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers={"ETag": tag})
        try:
            since = int(request.query_params.get("since_version", 0))
        except ValueError:
            raise Refused("bad_request", "since_version is an integer") from None
        rows = CustomMessageType.objects.filter(tenant=tenant, version__gt=since).order_by("custom_type")
        # A plain list, as DRF lists are; the version rides in headers (and in each row).
        return Response(
            CustomMessageTypeSerializer(rows, many=True).data,
            headers={"ETag": tag, "X-Registry-Version": str(tenant.registry_version)},
        )

    @extend_schema(request=CustomMessageTypeSerializer, responses={201: CustomMessageTypeSerializer})
    def post(self, request: Request) -> Response:
        values = validated(request, partial=False)
        try:
            row = do_create_type(request.user.tenant, values, actor_of(request))
        except InvalidType as exc:
            return field_errors(exc)
        return answer(row, status.HTTP_201_CREATED)


class TypeView(APIView):
    permission_classes = [ReadOrTenantAdmin]

    def _row(self, request: Request, custom_type: str) -> CustomMessageType:
        row = CustomMessageType.objects.filter(tenant=request.user.tenant, custom_type=custom_type).first()
        if row is None:
            raise Refused("not_found", f"no type {custom_type!r}")
        return row

    @extend_schema(responses=CustomMessageTypeSerializer)
    def get(self, request: Request, custom_type: str) -> Response:
        return answer(self._row(request, custom_type))

    def _update(self, request: Request, custom_type: str, *, partial: bool) -> Response:
        row = self._row(request, custom_type)
        values = validated(request, partial=partial, instance=row)
        try:
            row = do_update_type(request.user.tenant, custom_type, values, actor_of(request))
        except InvalidType as exc:
            return field_errors(exc)
        return answer(row)

    @extend_schema(request=CustomMessageTypeSerializer, responses=CustomMessageTypeSerializer)
    def put(self, request: Request, custom_type: str) -> Response:
        return self._update(request, custom_type, partial=False)

    @extend_schema(request=CustomMessageTypeSerializer, responses=CustomMessageTypeSerializer)
    def patch(self, request: Request, custom_type: str) -> Response:
        return self._update(request, custom_type, partial=True)

    # DELETE disables and answers 200 with the type; without the status drf-spectacular
    # documents DELETE as 204 with no body.
    @extend_schema(responses={200: CustomMessageTypeSerializer})
    def delete(self, request: Request, custom_type: str) -> Response:
        self._row(request, custom_type)
        try:
            row = do_disable_type(request.user.tenant, custom_type, actor_of(request))
        except InvalidType as exc:
            return field_errors(exc)
        return answer(row)
