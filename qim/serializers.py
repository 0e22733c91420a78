"""Request bodies of the core REST API, validated here and nowhere else."""

from __future__ import annotations

from rest_framework import serializers

USERNAME_FIELD = dict(max_length=64, regex=r"^[A-Za-z0-9_.@-]+$")


class TokenRequestSerializer(serializers.Serializer):
    tenant = serializers.CharField(max_length=64)
    username = serializers.CharField(max_length=64)
    password = serializers.CharField(max_length=256, trim_whitespace=False)
    device_id = serializers.RegexField(r"^[A-Za-z0-9_.:-]+$", max_length=64)


class TokenResponseSerializer(serializers.Serializer):
    token = serializers.CharField()
    user_id = serializers.CharField()


class CreateUserSerializer(serializers.Serializer):
    username = serializers.RegexField(**USERNAME_FIELD)
    password = serializers.CharField(min_length=1, max_length=256, trim_whitespace=False)
    display_name = serializers.CharField(max_length=128, required=False, allow_blank=True)


class CreateUserResponseSerializer(serializers.Serializer):
    user_id = serializers.CharField()
