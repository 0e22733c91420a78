"""An experiment, not a scenario (issue 22, idle CPU): does sending the keepalive's 2-byte
frames in bursts make each loopback send() cheaper than the same sends spread out?

    python bench/send_bursts.py [N] [BURSTS] [SECONDS]    # defaults: 18000 1,720,3600,1,720,3600 10

N socket pairs on 127.0.0.1, the server side in this process, the client side in 4 asyncio
receiver processes (as the bench's idle clients); N/25 sends a second (one per socket per 25 s,
the default keepalive), in bursts of B sends every B/rate seconds (B=1: spread evenly); prints
the sender's and the receivers' CPU per send. The keepalive it informed: docs/performance.md,
"Idle cost: the timing wheel and the kernel's TCP keepalive"."""
import asyncio
import multiprocessing as mp
import os
import resource
import socket
import sys
import time

import psutil

def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

class Sink(asyncio.Protocol):
    def data_received(self, data): pass

def receiver(port, n, ready):
    raise_nofile()
    async def main():
        loop = asyncio.get_running_loop()
        for _ in range(n):
            await loop.create_connection(Sink, "127.0.0.1", port)
        ready.put(n)
        await asyncio.sleep(10**6)
    asyncio.run(main())

def run(n, k, rate, bursts, seconds):
    raise_nofile()
    lst = socket.socket(); lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", 0)); lst.listen(4096); port = lst.getsockname()[1]
    ready = mp.Queue(); procs = [mp.Process(target=receiver, args=(port, n // k, ready), daemon=True) for _ in range(k)]
    for p in procs: p.start()
    socks = []
    while len(socks) < (n // k) * k:
        s, _ = lst.accept(); s.setblocking(False); socks.append(s)
    for _ in procs: ready.get()
    kids = [psutil.Process(p.pid) for p in procs]
    me = psutil.Process()
    time.sleep(1)
    for b in bursts:
        period = b / rate
        def cpu(): return sum(sum(c.cpu_times()[:2]) for c in kids), sum(me.cpu_times()[:2])
        r0, s0 = cpu(); t0 = time.monotonic(); sent = 0; nxt = t0; i = 0
        while time.monotonic() - t0 < seconds:
            for _ in range(b):
                socks[i].send(b"\x8a\x00"); i = (i + 1) % len(socks); sent += 1
            nxt += period
            d = nxt - time.monotonic()
            if d > 0: time.sleep(d)
        r1, s1 = cpu(); wall = time.monotonic() - t0
        print(f"burst {b:6d}: {sent} sends in {wall:.1f}s  sender {1e6*(s1-s0)/sent:6.1f} us/send  "
              f"receivers {1e6*(r1-r0)/sent:6.1f} us/send  node-side % of core {100*(s1-s0)/wall:.2f}  "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    for p in procs: p.terminate()

if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 18000
    bursts = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "1,720,3600,1,720,3600").split(",")]
    run(n, 4, n / 25, bursts, float(sys.argv[3]) if len(sys.argv) > 3 else 10)
