"""Request bodies of the push credentials API; the secrets in them are write-only."""

from __future__ import annotations

from rest_framework import serializers

from push_providers.models import TenantPushConfig

MAX_KEY_CHARS = 8192
MAX_ACCOUNT_CHARS = 16384


class ApnsCredentialsSerializer(serializers.Serializer):
    key_pem = serializers.CharField(max_length=MAX_KEY_CHARS, write_only=True, trim_whitespace=False)
    key_id = serializers.CharField(max_length=32)
    team_id = serializers.CharField(max_length=32)
    bundle_id = serializers.CharField(max_length=255)
    environment = serializers.ChoiceField(choices=[TenantPushConfig.PRODUCTION, TenantPushConfig.SANDBOX])


class FcmCredentialsSerializer(serializers.Serializer):
    service_account = serializers.JSONField(write_only=True)

    def validate_service_account(self, value: object) -> object:
        if len(str(value)) > MAX_ACCOUNT_CHARS:
            raise serializers.ValidationError(f"longer than {MAX_ACCOUNT_CHARS} characters")
        return value


class WebCredentialsSerializer(serializers.Serializer):
    private_key = serializers.CharField(max_length=MAX_KEY_CHARS, required=False, write_only=True)
    subject = serializers.CharField(max_length=255)


class GenerateVapidSerializer(serializers.Serializer):
    subject = serializers.CharField(max_length=255)


class ApnsSummarySerializer(serializers.Serializer):
    configured = serializers.BooleanField()
    key_id = serializers.CharField(allow_null=True)
    team_id = serializers.CharField(allow_null=True)
    bundle_id = serializers.CharField(allow_null=True)
    environment = serializers.CharField(allow_null=True)
    source = serializers.CharField(allow_null=True)


class FcmSummarySerializer(serializers.Serializer):
    configured = serializers.BooleanField()
    project_id = serializers.CharField(allow_null=True)
    client_email = serializers.CharField(allow_null=True)
    source = serializers.CharField(allow_null=True)


class WebSummarySerializer(serializers.Serializer):
    configured = serializers.BooleanField()
    public_key = serializers.CharField(allow_null=True)
    subject = serializers.CharField(allow_null=True)
    source = serializers.CharField(allow_null=True)


class CredentialsSummarySerializer(serializers.Serializer):
    """GET push/credentials: what is configured and where from, never a secret."""

    apns = ApnsSummarySerializer()
    fcm = FcmSummarySerializer()
    web = WebSummarySerializer()
