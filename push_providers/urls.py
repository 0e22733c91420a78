"""Routes of the push providers' API, included under /api/v1/."""

from django.urls import path

from push_providers import api

urlpatterns = [
    path("push/vapid-public-key", api.VapidPublicKeyView.as_view(), name="push-vapid-public-key"),
]
