"""Routes of the registry API, included under /api/v1/ (custom_type ids may contain dots)."""

from django.urls import path

from registry import api

urlpatterns = [
    path("registry/types", api.TypesView.as_view(), name="registry-types"),
    path("registry/types/<str:custom_type>", api.TypeView.as_view(), name="registry-type"),
]
