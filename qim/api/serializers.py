"""Request bodies of the core REST API, validated here and nowhere else."""

from __future__ import annotations

from rest_framework import serializers

USER_ID = dict(max_length=64, regex=r"^[A-Za-z0-9_.@-]+$")
DEVICE_ID = dict(max_length=64, regex=r"^[A-Za-z0-9_.:-]+$")


class TokenRequestSerializer(serializers.Serializer):
    tenant = serializers.CharField(max_length=64)
    username = serializers.CharField(max_length=64)
    password = serializers.CharField(max_length=256, trim_whitespace=False)
    device_id = serializers.RegexField(**DEVICE_ID)


class TokenResponseSerializer(serializers.Serializer):
    token = serializers.CharField()
    user_id = serializers.CharField()
    # When the token stops working (QIM_TOKEN_TTL_S); null when tokens do not expire.
    expires_at_ms = serializers.IntegerField(allow_null=True)


class CreateUserSerializer(serializers.Serializer):
    username = serializers.RegexField(**USER_ID)
    password = serializers.CharField(min_length=1, max_length=256, trim_whitespace=False)
    display_name = serializers.CharField(max_length=128, required=False, allow_blank=True)


class UserIdSerializer(serializers.Serializer):
    user_id = serializers.CharField()


class CreateConversationSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["group", "direct"])
    title = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    member_user_ids = serializers.ListField(child=serializers.CharField(max_length=64), max_length=1000)
    e2ee = serializers.BooleanField(required=False, default=False)


class ConversationIdSerializer(serializers.Serializer):
    conversation_id = serializers.CharField()


class AddMembersSerializer(serializers.Serializer):
    user_ids = serializers.ListField(child=serializers.CharField(max_length=64), min_length=1, max_length=1000)


class ConversationSeqSerializer(serializers.Serializer):
    conversation_seq = serializers.IntegerField()


class UpdateMemberSerializer(serializers.Serializer):
    """PATCH of one membership: `role` (the owner decides) and/or `tier` (the member)."""

    role = serializers.ChoiceField(choices=["owner", "admin", "member"], required=False)
    tier = serializers.ChoiceField(choices=["full", "mention_only"], required=False)

    def validate(self, attrs: dict) -> dict:
        if not attrs:
            raise serializers.ValidationError("name a role or a tier")
        return attrs


class MemberChangeSerializer(serializers.Serializer):
    user_id = serializers.CharField()
    role = serializers.CharField(required=False)
    tier = serializers.CharField(required=False)
    conversation_seq = serializers.IntegerField(allow_null=True, required=False)


class UpdateConversationSerializer(serializers.Serializer):
    """PATCH of a group: its title and policies (owner and admins)."""

    title = serializers.CharField(max_length=200, required=False, allow_blank=True)
    mention_all_policy = serializers.ChoiceField(choices=["admins", "members"], required=False)
    add_members_policy = serializers.ChoiceField(choices=["admins", "members"], required=False)

    def validate(self, attrs: dict) -> dict:
        if not attrs:
            raise serializers.ValidationError("name a title or a policy")
        return attrs


class ConversationSettingsSerializer(serializers.Serializer):
    conversation_id = serializers.CharField()
    kind = serializers.CharField()
    title = serializers.CharField()
    mention_all_policy = serializers.CharField()
    add_members_policy = serializers.CharField()
    member_count = serializers.IntegerField()
    role = serializers.CharField(required=False)
    tier = serializers.CharField(required=False)
    member = serializers.BooleanField(required=False)
    conversation_seq = serializers.IntegerField(allow_null=True, required=False)


class MemberItemSerializer(serializers.Serializer):
    user_id = serializers.CharField()
    display_name = serializers.CharField()
    role = serializers.CharField()


class MemberPageSerializer(serializers.Serializer):
    members = MemberItemSerializer(many=True)
    next = serializers.CharField(allow_null=True)


class WebPushKeysSerializer(serializers.Serializer):
    p256dh = serializers.CharField(max_length=128)
    auth = serializers.CharField(max_length=64)


class WebPushSubscriptionSerializer(serializers.Serializer):
    """A browser's PushSubscription.toJSON(), as the Push API gives it."""

    endpoint = serializers.CharField(max_length=1024)
    keys = WebPushKeysSerializer()


class PushCredentialsSerializer(serializers.Serializer):
    """ios/android: push_token (and voip_token for PushKit); web: the browser's subscription."""

    platform = serializers.ChoiceField(choices=["ios", "android", "web"])
    push_token = serializers.CharField(max_length=512, required=False, default="")
    voip_token = serializers.CharField(max_length=512, required=False, allow_blank=True, default="")
    subscription = WebPushSubscriptionSerializer(required=False)

    def validate(self, data: dict) -> dict:
        if data["platform"] == "web":
            if "subscription" not in data:
                raise serializers.ValidationError({"subscription": "required for platform web"})
            if data["voip_token"]:
                raise serializers.ValidationError({"voip_token": "not for platform web"})
        elif not data["push_token"]:
            raise serializers.ValidationError({"push_token": "required for platform ios and android"})
        return data


class ModerationRecallSerializer(serializers.Serializer):
    conversation_id = serializers.CharField(max_length=64)
    conversation_seq = serializers.IntegerField(min_value=1)
    reason = serializers.CharField(max_length=1000, required=False, allow_blank=True, default="")


class EventSeqSerializer(serializers.Serializer):
    event_conversation_seq = serializers.IntegerField()
