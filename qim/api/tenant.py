"""The caller's tenant's own settings over REST: read by any user, changed by a tenant admin."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from qim.models import Tenant
from qim.api.permissions import Authenticated, IsTenantAdmin

# Ten years: far past any retention policy, and far from overflowing a millisecond cut-off.
MAX_RETENTION_S = 10 * 366 * 24 * 3600


class TenantSettingsSerializer(serializers.Serializer):
    tenant = serializers.CharField(read_only=True)
    # Messages older than this many seconds are deleted by `qim_retention`; 0 keeps them forever.
    message_retention_s = serializers.IntegerField(min_value=0, max_value=MAX_RETENTION_S)


def settings_of(tenant: Tenant) -> dict:
    return {"tenant": tenant.name, "message_retention_s": tenant.message_retention_s}


class TenantSettingsView(APIView):
    """GET: the tenant's settings; PATCH (tenant admin): change them."""

    def get_permissions(self):  # type: ignore[no-untyped-def]
        if getattr(self.request, "method", "GET") in SAFE_METHODS:
            return [Authenticated()]
        return [IsTenantAdmin()]

    @extend_schema(responses=TenantSettingsSerializer)
    def get(self, request: Request) -> Response:
        return Response(settings_of(request.user.tenant))

    @extend_schema(request=TenantSettingsSerializer, responses=TenantSettingsSerializer)
    def patch(self, request: Request) -> Response:
        body = TenantSettingsSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        tenant = request.user.tenant
        if "message_retention_s" in body.validated_data:
            tenant.message_retention_s = body.validated_data["message_retention_s"]
            Tenant.objects.filter(pk=tenant.pk).update(message_retention_s=tenant.message_retention_s)
        return Response(settings_of(tenant))
