"""The registry API's bodies; the rules themselves live in registry.validation."""

from __future__ import annotations

from rest_framework import serializers

from registry.models import ANCHOR_MODES, DELIVERY_CLASSES, CustomMessageType
from registry.validation import TYPE_FIELDS


class CustomMessageTypeSerializer(serializers.ModelSerializer):
    delivery_class = serializers.ChoiceField(choices=DELIVERY_CLASSES, default="persistent")
    anchor_mode = serializers.ChoiceField(choices=ANCHOR_MODES, default="own_seq")
    max_payload_bytes = serializers.IntegerField(default=4096)

    class Meta:
        model = CustomMessageType
        fields = ["custom_type", *TYPE_FIELDS, "version"]
        read_only_fields = ["version"]
        # Uniqueness is the action's to answer (409 conflict), not a 400 from the serializer.
        validators: list = []
        extra_kwargs = {"custom_type": {"validators": []}}
