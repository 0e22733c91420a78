"""The Python reference point: a minimal `websockets` server broadcasting each message it gets
to every connection with `websockets.broadcast`, encoded once.

    python bench/baselines/raw_ws.py --port N

No compression, like the receivers; the listen backlog QIM's nodes get. Raises its file-descriptor limit to the hard limit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource

from websockets.asyncio.server import broadcast, serve
from websockets.exceptions import ConnectionClosedError

CONNECTIONS: set = set()


async def handler(websocket) -> None:  # type: ignore[no-untyped-def]
    CONNECTIONS.add(websocket)
    try:
        async for text in websocket:
            message = json.loads(text)["message"]
            broadcast(CONNECTIONS, json.dumps({"message": message}))
    except ConnectionClosedError:
        pass  # a client aborted its socket (benches do, by the thousand): no traceback each
    finally:
        CONNECTIONS.discard(websocket)


async def main(port: int) -> None:
    # The listen backlog QIM's daphne gets (tests/harness/qim_process.py LISTEN_BACKLOG), not
    # asyncio's 100: a connect storm measures both servers, not their SYN queues.
    async with serve(handler, "127.0.0.1", port, compression=None, max_size=None, ping_interval=None, backlog=2048):
        await asyncio.Future()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(main(parser.parse_args().port))
