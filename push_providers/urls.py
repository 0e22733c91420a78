"""Routes of the push providers' API, included under /api/v1/."""

from django.urls import path

from push_providers import api

urlpatterns = [
    path("push/vapid-public-key", api.VapidPublicKeyView.as_view(), name="push-vapid-public-key"),
    path("push/credentials", api.PushCredentialsView.as_view(), name="push-credentials"),
    path("push/credentials/apns", api.ApnsCredentialsView.as_view(), name="push-credentials-apns"),
    path("push/credentials/fcm", api.FcmCredentialsView.as_view(), name="push-credentials-fcm"),
    path("push/credentials/web", api.WebCredentialsView.as_view(), name="push-credentials-web"),
    path("push/credentials/web/generate", api.GenerateVapidView.as_view(), name="push-credentials-web-generate"),
]
