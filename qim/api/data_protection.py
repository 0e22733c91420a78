"""A tenant admin's data-protection requests over REST: export one user's data, erase one
user. The same work as `qim_user_export` / `qim_user_erase` (qim/ops/export.py,
qim/actions/erasure.py), for tenants whose admins have no shell on the servers."""

from __future__ import annotations

import io

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from qim.actions.erasure import do_erase_user
from qim.errors import Refused
from qim.ops.export import export_user
from qim.models import User
from qim.api.permissions import IsTenantAdmin


def access_tenant_user(admin: User, user_id: str) -> User:
    """The user of the admin's own tenant; `not_found` for any other, as for a missing one."""
    user = User.objects.select_related("tenant").filter(tenant_id=admin.tenant_id, username=user_id).first()
    if user is None:
        raise Refused("not_found", f"no user {user_id!r}")
    return user


class UserExportView(APIView):
    """GET: the user's data as JSON lines (docs/operations.md §5.4), never a secret."""

    permission_classes = [IsTenantAdmin]

    @extend_schema(responses={(200, "application/x-ndjson"): OpenApiResponse(description="JSON lines")})
    def get(self, request: Request, user_id: str) -> HttpResponse:
        user = access_tenant_user(request.user, user_id)
        out = io.StringIO()
        export_user(user, out)
        response = HttpResponse(out.getvalue(), content_type="application/x-ndjson; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{user.tenant.name}-user-export.jsonl"'
        response["Cache-Control"] = "no-store"
        return response


class UserEraseView(APIView):
    """POST: erase the user (qim/actions/erasure.py); cannot be undone. An admin cannot erase
    themself (a tenant must keep someone able to act)."""

    permission_classes = [IsTenantAdmin]

    @extend_schema(request=None, responses={200: dict})
    def post(self, request: Request, user_id: str) -> Response:
        user = access_tenant_user(request.user, user_id)
        if user.pk == request.user.pk:
            raise Refused("conflict", "you cannot erase yourself")
        done = do_erase_user(user)
        return Response({"erased_user_id": user_id, **done})
