"""HTTP routes: the REST API under /api/v1/ (no trailing slashes), the admin, and the web
client's page at / (and its service worker at /sw.js)."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from qim.api import data_protection as api_data_protection
from qim.api import docs as api_docs
from qim.api import tenant as api_tenant
from qim.api import views as api
from qim.api import web_client
from qim.ops import readiness
from qim.ops.metrics.view import metrics

api_v1 = [
    path("auth/token", api.AuthTokenView.as_view(), name="auth-token"),
    path("users", api.UsersView.as_view(), name="users"),
    path("users/<str:user_id>/deactivate", api.UserDeactivateView.as_view(), name="user-deactivate"),
    path("users/<str:user_id>/export", api_data_protection.UserExportView.as_view(), name="user-export"),
    path("users/<str:user_id>/erase", api_data_protection.UserEraseView.as_view(), name="user-erase"),
    path("conversations", api.ConversationsView.as_view(), name="conversations"),
    path("conversations/<str:conversation_id>", api.ConversationView.as_view(), name="conversation"),
    path("conversations/<str:conversation_id>/members", api.MemberListView.as_view(), name="members"),
    path(
        "conversations/<str:conversation_id>/members/<str:user_id>",
        api.MemberView.as_view(),
        name="member",
    ),
    path("devices/<str:device_id>/push", api.DevicePushView.as_view(), name="device-push"),
    path("moderation/recall", api.ModerationRecallView.as_view(), name="moderation-recall"),
    path("node", api.NodeStatsView.as_view(), name="node-stats"),
    path("health", api.HealthView.as_view(), name="health"),
    path("ready", readiness.ready, name="ready"),
    path("tenant/settings", api_tenant.TenantSettingsView.as_view(), name="tenant-settings"),
    path("", include("registry.urls")),
    path("", include("rtc.urls")),
    path("", include("rooms.urls")),
    path("", include("push_providers.urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", api_docs.swagger, name="docs"),
    path("redoc/", api_docs.redoc, name="redoc"),
]

urlpatterns = [
    path("api/v1/", include(api_v1)),
    path("admin/", admin.site.urls),
    # Prometheus, per node (docs/operations.md, "Metrics").
    path("metrics", metrics, name="metrics"),
    path("sw.js", web_client.service_worker, name="web-client-worker"),
    path("", web_client.index, name="web-client"),
]

handler400 = "qim.api.errors.json_bad_request"
handler404 = "qim.api.errors.json_not_found"
handler500 = "qim.api.errors.json_server_error"
