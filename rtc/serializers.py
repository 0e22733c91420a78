"""Answer shapes of the RTC REST API, for the OpenAPI schema."""

from __future__ import annotations

from rest_framework import serializers


class IceServerSerializer(serializers.Serializer):
    urls = serializers.ListField(child=serializers.CharField())
    username = serializers.CharField()
    credential = serializers.CharField()


class IceServersSerializer(serializers.Serializer):
    ice_servers = IceServerSerializer(many=True)
    ttl_s = serializers.IntegerField()
