"""An experiment, not a scenario (issue 22, idle CPU): do the kernel's TCP keepalive probes of
many loopback sockets that went quiet together get lost, and does the node's keepalive
schedule (qim/server/heartbeat.py `kernel_schedule`) keep those sockets open anyway?

    python bench/keepalive_probes.py [N] [SECONDS]    # defaults: 9000 80

N loopback socket pairs opened as fast as one process can (the server ends in this process,
the client ends held open and silent, so only the kernel answers probes); the server ends get
SO_KEEPALIVE, in turn on the first design ("single": TCP_USER_TIMEOUT 30 s from the start of
the silence, so the first probe lost aborts) and on `kernel_schedule`'s ("schedule"). After
SECONDS of silence it counts the server ends the kernel aborted (a recv() error) and the
loopback packets the kernel dropped (/proc/net/softnet_stat's second column) in that time.
Figures in docs/performance.md, "Idle cost: the timing wheel and the kernel's TCP keepalive"."""
import random
import resource
import socket
import sys
import time

sys.path.insert(0, ".")
import django  # noqa: E402  kernel_schedule lives beside the node's Django settings
import os  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qim.settings")
django.setup()
from qim.server.heartbeat import KernelSchedule, kernel_schedule, set_kernel_keepalive  # noqa: E402


def softnet_drops() -> int:
    with open("/proc/net/softnet_stat") as stats:
        return sum(int(line.split()[1], 16) for line in stats)


# The first design: first probe at 25 s, every 10 s after, TCP_USER_TIMEOUT 30 s from the silence.
FIRST_DESIGN = KernelSchedule(idle_s=25, probe_interval_s=10, probe_count=3, user_timeout_ms=30_000)


def single(sock: socket.socket) -> None:
    assert set_kernel_keepalive(sock, FIRST_DESIGN)


def scheduled(sock: socket.socket) -> None:
    assert set_kernel_keepalive(sock, kernel_schedule(25.0, 30.0, random.random()))


def run(name: str, configure, n: int, seconds: float) -> dict:  # type: ignore[no-untyped-def]
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    servers, clients = [], []
    started = time.monotonic()
    for _ in range(n):
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        configure(server)
        server.setblocking(False)
        servers.append(server)
        clients.append(client)
    opened_s = time.monotonic() - started
    drops = softnet_drops()
    time.sleep(seconds)
    aborted = 0
    for server in servers:
        try:
            server.recv(1)
        except BlockingIOError:
            continue  # alive, nothing to read
        except OSError:
            aborted += 1
    row = {"design": name, "sockets": n, "opened_s": round(opened_s, 1), "silent_s": seconds,
           "aborted": aborted, "loopback_drops": softnet_drops() - drops}
    for sock in servers + clients + [listener]:
        sock.close()
    return row


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 80.0
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"{'design':10} {'sockets':>8} {'opened s':>9} {'silent s':>9} {'aborted':>8} {'loopback drops':>15}")
    for name, configure in (("single", single), ("schedule", scheduled)):
        row = run(name, configure, n, seconds)
        print(f"{row['design']:10} {row['sockets']:>8} {row['opened_s']:>9} {row['silent_s']:>9g} "
              f"{row['aborted']:>8} {row['loopback_drops']:>15}", flush=True)


if __name__ == "__main__":
    main()
