"""The container and systemd files describe the topology the local-cluster test runs: they
cannot be run here (no base images), so these checks keep them from drifting from it."""

from __future__ import annotations

import configparser
from pathlib import Path

import yaml

from tests.harness.qim_process import REPO

ROLES = {"node", "worker", "proxy", "prepare"}


def test_every_qim_service_runs_the_tested_entrypoint_in_a_known_role() -> None:
    compose = yaml.safe_load((REPO / "deploy/compose.yaml").read_text())
    services = compose["services"]
    qim = {name: s for name, s in services.items() if s.get("image") == "qim:local"}
    assert set(qim) == {"prepare", "node-1", "node-2", "worker", "proxy"}
    assert {s["command"][0] for s in qim.values()} == ROLES
    nodes = {s["environment"]["QIM_NODE_ID"] for n, s in qim.items() if s["command"] == ["node"]}
    assert nodes == {"node-1", "node-2"}  # distinct ids: each names its own channel
    upstreams = qim["proxy"]["environment"]["QIM_PROXY_UPSTREAMS"].split(",")
    assert {u.split(":")[0] for u in upstreams} == {"node-1", "node-2"}
    for service in qim.values():
        env = service["environment"]
        assert env["QIM_DATABASE_URL"].startswith("postgres://") and env["QIM_REDIS_URL"].startswith("redis://")
        assert env["QIM_SECRET_KEY"].startswith("${QIM_SECRET_KEY:?")  # never a key in the file


def test_the_image_runs_the_entrypoint_as_a_user_that_is_not_root() -> None:
    lines = [line.strip() for line in (REPO / "deploy/Dockerfile").read_text().splitlines()]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in {"root", "0"}
    assert 'ENTRYPOINT ["python", "deploy/cluster.py"]' in lines
    assert (REPO / "deploy/cluster.py").exists()


def test_the_systemd_template_names_the_node_after_its_instance() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((REPO / "docs/deploy/qim@.service").read_text())
    service = unit["Service"]
    assert "QIM_NODE_ID=%i" in service["Environment"].split()
    assert service["ExecStart"].endswith("deploy/cluster.py node")
    assert service["User"] != "root"
    assert Path(service["WorkingDirectory"]).is_absolute()
