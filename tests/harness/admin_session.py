"""An operator logged into a running node's Django admin over real HTTP (httpx): the login
form, CSRF and session cookie as a browser would send them."""

from __future__ import annotations

import itertools
import re
from html import unescape

import httpx

from tests.harness.qim_process import QimNode, manage

_serial = itertools.count(1)
PASSWORD = "operator-pw"


class AdminSession:
    def __init__(self, node: QimNode, username: str) -> None:
        self.client = httpx.Client(base_url=node.http_url, timeout=60, follow_redirects=True)
        self.client.get("/admin/login/")
        answer = self.client.post("/admin/login/?next=/admin/", data={
            "username": username, "password": PASSWORD, "next": "/admin/", "csrfmiddlewaretoken": self.csrf,
        })
        assert answer.status_code == 200 and 'id="user-tools"' in answer.text, answer.text[:2000]

    @property
    def csrf(self) -> str:
        return self.client.cookies["csrftoken"]

    def page(self, path: str) -> str:
        """The page's HTML (unescaped), after asserting it rendered."""
        answer = self.client.get(path)
        assert answer.status_code == 200, f"{path} -> {answer.status_code}: {answer.text[:2000]}"
        return unescape(answer.text)

    def rows(self, path: str) -> str:
        """Only the change list's table body: what the list shows, without the filters."""
        match = re.search(r"<tbody>(.*?)</tbody>", self.page(path), re.S)
        return match.group(1) if match else ""

    def action(self, changelist: str, action: str, ids: list[int | str]) -> str:
        """Run an admin action on the selected rows; answers the page it lands on."""
        answer = self.client.post(changelist, data={
            "action": action, "_selected_action": [str(i) for i in ids], "index": "0",
            "csrfmiddlewaretoken": self.csrf,
        })
        assert answer.status_code == 200, answer.text[:2000]
        return unescape(answer.text)

    def close(self) -> None:
        self.client.close()


def create_operator(env: dict[str, str]) -> str:
    """A new superuser in the deployment's database; answers its username."""
    username = f"operator{next(_serial)}"
    manage({**env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD}, "createsuperuser", "--noinput",
           "--username", username, "--email", f"{username}@example.com")
    return username
