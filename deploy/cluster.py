#!/usr/bin/env python3
"""QIM as a cluster: the one entrypoint of `make cluster`, the compose services
(deploy/compose.yaml) and the systemd unit (docs/deploy/qim@.service).

Roles (the first argument):
  all      what `make cluster` runs: PostgreSQL and Redis (unless QIM_DATABASE_URL /
           QIM_REDIS_URL name running ones), `prepare`, two nodes, a push worker and nginx in
           front of the nodes; prints one JSON line when everything answers; Ctrl-C (SIGINT or
           SIGTERM) stops it all, the database and Redis last.
  prepare  migrate, collectstatic and the demo tenant (all idempotent), then exit.
  node     one daphne node (QIM_NODE_ID) on --bind:--node-port, behind a proxy.
  worker   the push worker (qim_push_worker).
  proxy    nginx on --port in front of --upstreams, serving /static/ itself.

Every option has an environment variable (named in --help) so containers and unit files set
them the same way. Children inherit the environment, QIM_* settings included.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from backing import Postgres, Redis, wait_for_port  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
DAPHNE_LIMITS = ["--websocket-max-message-size", "1048576", "--websocket-max-frame-size", "1048576"]
DEMO_TENANT = "demo"
LISTEN_BACKLOG = 2048


def parse_args(argv: list[str]) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", choices=["all", "prepare", "node", "worker", "proxy"], nargs="?", default="all")
    parser.add_argument("--dir", type=Path, default=Path(env("QIM_CLUSTER_DIR", REPO / "var" / "cluster")),
                        help="state: database, Redis dump, static files, logs (QIM_CLUSTER_DIR)")
    parser.add_argument("--port", type=int, default=int(env("QIM_CLUSTER_PORT", "8000")),
                        help="where the proxy listens (QIM_CLUSTER_PORT)")
    parser.add_argument("--listen", default=env("QIM_CLUSTER_LISTEN", "127.0.0.1"),
                        help="the proxy's address (QIM_CLUSTER_LISTEN; 0.0.0.0 in a container)")
    parser.add_argument("--node-ports", default=env("QIM_CLUSTER_NODE_PORTS", "8001,8002"),
                        help="`all`: one node per port (QIM_CLUSTER_NODE_PORTS)")
    parser.add_argument("--node-port", type=int, default=int(env("QIM_NODE_PORT", "8001")),
                        help="`node`: its port (QIM_NODE_PORT)")
    parser.add_argument("--bind", default=env("QIM_NODE_BIND", "127.0.0.1"),
                        help="`node`: its address; only the proxy should reach it (QIM_NODE_BIND)")
    parser.add_argument("--upstreams", default=env("QIM_PROXY_UPSTREAMS", ""),
                        help="`proxy`: host:port of each node, comma-separated (QIM_PROXY_UPSTREAMS)")
    parser.add_argument("--pg-port", type=int, default=int(env("QIM_CLUSTER_PG_PORT", "55432")),
                        help="`all`: its own PostgreSQL's port (QIM_CLUSTER_PG_PORT)")
    parser.add_argument("--redis-port", type=int, default=int(env("QIM_CLUSTER_REDIS_PORT", "56379")),
                        help="`all`: its own Redis's port (QIM_CLUSTER_REDIS_PORT)")
    parser.add_argument("--demo-password", default=env("QIM_DEMO_PASSWORD", "demo-password"),
                        help="`prepare`: the demo tenant admin's password (QIM_DEMO_PASSWORD)")
    return parser.parse_args(argv)


def manage(*args: str, capture: bool = False) -> str:
    done = subprocess.run([PYTHON, "manage.py", *args], cwd=REPO, check=True, text=True,
                          stdout=subprocess.PIPE if capture else None)
    return done.stdout or ""


def prepare(options: argparse.Namespace) -> None:
    """Schema, static files and a demo tenant; the admin's token goes to a 0600 file, never
    to the terminal."""
    manage("migrate", "-v0")
    manage("collectstatic", "--noinput", "-v0")
    line = manage("qim_bootstrap", "--tenant", DEMO_TENANT, "--admin", "admin",
                  "--password", options.demo_password, capture=True).strip().splitlines()[-1]
    secret = options.dir / "demo-admin.json"
    secret.touch(mode=0o600)
    secret.write_text(line + "\n")


def listen_endpoint(bind: str, port: int) -> str:
    """daphne's -b/-p listen with Twisted's default backlog of 50, which a reconnect storm
    overflows (each dropped SYN costs its client 1 s, then 3 s): an endpoint string sets it
    (docs/performance.md, "Lean handshake, upgrade, frame and per-socket paths"); the kernel caps
    it at somaxconn."""
    interface = bind.strip("[]").replace(":", "\\:")
    return f"tcp:port={port}:interface={interface}:backlog={LISTEN_BACKLOG}"


def node_argv(bind: str, port: int) -> list[str]:
    """daphne behind a proxy: --proxy-headers takes the client's address from the
    X-Forwarded-For that nginx sets (per-address limits count real clients)."""
    return [PYTHON, "-m", "daphne", "-e", listen_endpoint(bind, port), "--proxy-headers", *DAPHNE_LIMITS,
            "qim.asgi:application"]


def render_nginx(options: argparse.Namespace, upstreams: list[str]) -> Path:
    """nginx.conf for this cluster under --dir (its pid, logs and temp files there too)."""
    run_dir = options.dir / "nginx"
    run_dir.mkdir(parents=True, exist_ok=True)
    static_root = os.environ.get("QIM_STATIC_ROOT", str(options.dir / "static"))
    # As root nginx would hand its workers to `nobody`, who cannot write --dir: keep them ours.
    user_line = "user root root;" if os.geteuid() == 0 else ""
    values = {
        "USER_LINE": user_line,
        "RUN_DIR": str(run_dir),
        "UPSTREAM_SERVERS": "\n".join(f"        server {u};" for u in upstreams),
        "LISTEN": f"{options.listen}:{options.port}",
        "STATIC_ROOT": static_root.rstrip("/"),
    }
    text = (Path(__file__).parent / "nginx.conf.template").read_text()
    for name, value in values.items():
        text = text.replace("${" + name + "}", value)
    conf = run_dir / "nginx.conf"
    conf.write_text(text)
    return conf


def proxy_argv(conf: Path) -> list[str]:
    # -e: the error log before the configuration is read, so a non-root nginx never opens
    # /var/log/nginx (a container's user cannot).
    return ["nginx", "-c", str(conf), "-p", str(conf.parent), "-e", str(conf.parent / "nginx-error.log")]


def wait_healthy(url: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer 200 within {timeout:g} s")


class Supervisor:
    """The children of `all`: started in order, stopped in reverse; one that dies stops all."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "a")
        process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.children.append((name, process))
        return process

    def first_exited(self) -> tuple[str, int] | None:
        for name, process in self.children:
            if process.poll() is not None:
                return name, process.returncode
        return None

    def stop(self) -> None:
        for name, process in reversed(self.children):
            if process.poll() is None:
                process.terminate()
        for name, process in reversed(self.children):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                print(f"{name} did not stop in 20 s: killed", flush=True)


def run_all(options: argparse.Namespace) -> int:
    options.dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("QIM_VAR_DIR", str(options.dir))
    postgres = redis = None
    if not os.environ.get("QIM_DATABASE_URL"):
        postgres = Postgres(options.dir / "postgres", options.pg_port)
        postgres.start()
        print(f"PostgreSQL on 127.0.0.1:{options.pg_port}, data in {postgres.directory}", flush=True)
        os.environ["QIM_DATABASE_URL"] = postgres.url
    if not os.environ.get("QIM_REDIS_URL"):
        redis = Redis(options.dir / "redis", options.redis_port)
        redis.start()
        os.environ["QIM_REDIS_URL"] = redis.url
    supervisor = Supervisor(options.dir)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        prepare(options)
        ports = [int(p) for p in options.node_ports.split(",") if p.strip()]
        for n, port in enumerate(ports, 1):
            supervisor.start(f"node-{n}", node_argv("127.0.0.1", port), {**os.environ, "QIM_NODE_ID": f"node-{n}"})
        supervisor.start("worker", [PYTHON, "manage.py", "qim_push_worker"], dict(os.environ))
        for port in ports:
            wait_healthy(f"http://127.0.0.1:{port}/api/v1/health")
        conf = render_nginx(options, [f"127.0.0.1:{port}" for port in ports])
        supervisor.start("proxy", proxy_argv(conf), dict(os.environ))
        wait_for_port(options.port, host=options.listen if options.listen != "0.0.0.0" else "127.0.0.1")
        url = f"http://{options.listen}:{options.port}"
        print(json.dumps({"ready": url, "nodes": {f"node-{n}": p for n, p in enumerate(ports, 1)},
                          "dir": str(options.dir)}), flush=True)
        print(f"QIM cluster at {url} (admin: {url}/admin/, demo admin token in "
              f"{options.dir / 'demo-admin.json'}); Ctrl-C stops it", flush=True)
        while not stopping:
            exited = supervisor.first_exited()
            if exited is not None:
                print(f"{exited[0]} exited with {exited[1]}: stopping the cluster "
                      f"(its log: {options.dir / (exited[0] + '.log')})", flush=True)
                return 1
            time.sleep(0.5)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        supervisor.stop()
        if redis is not None:
            redis.stop()
        if postgres is not None:
            postgres.stop()


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    if options.role == "all":
        return run_all(options)
    options.dir.mkdir(parents=True, exist_ok=True)
    if options.role == "prepare":
        prepare(options)
        return 0
    if options.role == "node":
        os.execv(PYTHON, node_argv(options.bind, options.node_port))
    if options.role == "worker":
        os.execv(PYTHON, [PYTHON, "manage.py", "qim_push_worker"])
    upstreams = [u.strip() for u in options.upstreams.split(",") if u.strip()]
    if not upstreams:
        raise SystemExit("proxy: --upstreams (QIM_PROXY_UPSTREAMS) names no node")
    conf = render_nginx(options, upstreams)
    os.execvp("nginx", proxy_argv(conf))
    return 0


if __name__ == "__main__":
    os.chdir(REPO)
    sys.exit(main(sys.argv[1:]))
