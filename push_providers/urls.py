"""Routes of the push providers' API, included under /api/v1/."""

from django.urls import path

from push_providers import api

urlpatterns = [
    path("push/vapid-public-key", api.VapidPublicKeyView.as_view(), name="push-vapid-public-key"),
    path("push/credentials", api.PushCredentialsView.as_view(), name="push-credentials"),
    path("push/credentials/web/generate", api.GenerateVapidView.as_view(), name="push-credentials-web-generate"),
    path("push/credentials/<str:provider>", api.PushProviderCredentialsView.as_view(), name="push-credentials-provider"),
]
