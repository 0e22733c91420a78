"""Push providers over REST: the VAPID public key browsers subscribe with, and each tenant's
own provider credentials (tenant admins; secrets are write-only)."""

from __future__ import annotations

from django.db import transaction
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from qim.api.views import valid
from qim.errors import Refused
from qim.api.permissions import IsTenantAdmin
from push_providers import validation
from push_providers.actions import (
    do_clear_provider,
    do_generate_vapid,
    do_set_apns,
    do_set_fcm,
    do_set_vapid,
)
from push_providers.credentials import credentials_for
from push_providers.queries import credentials_summary
from push_providers.serializers import (
    ApnsCredentialsSerializer,
    CredentialsSummarySerializer,
    FcmCredentialsSerializer,
    GenerateVapidSerializer,
    WebCredentialsSerializer,
)


class VapidPublicKeyView(APIView):
    """The applicationServerKey for PushManager.subscribe(): the tenant's VAPID public key, or
    the global one when the tenant has none; any user of the tenant."""

    @extend_schema(responses=inline_serializer("VapidPublicKey", {"public_key": serializers.CharField()}))
    def get(self, request: Request) -> Response:
        vapid = credentials_for(request.user.tenant_id).vapid
        if vapid is None:
            raise Refused("not_found", "Web Push is not configured on this server")
        return Response({"public_key": vapid.public_key_b64url()})


def summary(request: Request) -> Response:
    return Response(credentials_summary(request.user.tenant_id))


class PushCredentialsView(APIView):
    """What the caller's tenant pushes with: each provider's ids and public parts and whether
    they are the tenant's own or the global ones; never a secret."""

    permission_classes = [IsTenantAdmin]

    @extend_schema(responses=CredentialsSummarySerializer)
    def get(self, request: Request) -> Response:
        return summary(request)


class ProviderCredentialsView(APIView):
    """One provider's credentials of the caller's tenant: PUT (in each subclass) checks and
    stores the tenant's own; DELETE forgets them, so the global ones apply again. Both answer
    the summary."""

    permission_classes = [IsTenantAdmin]
    provider = ""

    @extend_schema(responses={200: CredentialsSummarySerializer})  # DELETE would default to 204
    def delete(self, request: Request) -> Response:
        with transaction.atomic():
            do_clear_provider(request.user.tenant, self.provider)
        return summary(request)


class ApnsCredentialsView(ProviderCredentialsView):
    provider = "apns"

    @extend_schema(request=ApnsCredentialsSerializer, responses=CredentialsSummarySerializer)
    def put(self, request: Request) -> Response:
        values = validation.check_apns(valid(ApnsCredentialsSerializer, request))
        with transaction.atomic():
            do_set_apns(request.user.tenant, values)
        return summary(request)


class FcmCredentialsView(ProviderCredentialsView):
    provider = "fcm"

    @extend_schema(request=FcmCredentialsSerializer, responses=CredentialsSummarySerializer)
    def put(self, request: Request) -> Response:
        account = validation.check_service_account(valid(FcmCredentialsSerializer, request)["service_account"])
        with transaction.atomic():
            do_set_fcm(request.user.tenant, account)
        return summary(request)


class WebCredentialsView(ProviderCredentialsView):
    provider = "web"

    @extend_schema(request=WebCredentialsSerializer, responses=CredentialsSummarySerializer)
    def put(self, request: Request) -> Response:
        data = valid(WebCredentialsSerializer, request)
        key = validation.check_vapid_key(data["private_key"]) if "private_key" in data else None
        subject = validation.check_subject(data["subject"])
        with transaction.atomic():
            do_set_vapid(request.user.tenant, key, subject)
        return summary(request)


class GenerateVapidView(APIView):
    """A new VAPID key pair for the tenant; answers its public key (applicationServerKey).
    Browsers subscribed with the previous key must subscribe again."""

    permission_classes = [IsTenantAdmin]

    @extend_schema(
        request=GenerateVapidSerializer,
        responses={201: inline_serializer("GeneratedVapidKey", {"public_key": serializers.CharField()})},
    )
    def post(self, request: Request) -> Response:
        subject = validation.check_subject(valid(GenerateVapidSerializer, request)["subject"])
        with transaction.atomic():
            public_key = do_generate_vapid(request.user.tenant, subject)
        return Response({"public_key": public_key}, status=status.HTTP_201_CREATED)
