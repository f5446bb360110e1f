"""The ceiling: a bare aiohttp server, one process, answering every GET with fixed bytes (the
gateway's own loadTable body) as ``application/json``. No routing logic, no auth, no I/O: the
most a single aiohttp process can serve on this machine.

    python -m bench.ceiling --port PORT --body FILE      # serve (uvloop if importable)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from aiohttp import web

from bench import processes
from bench.endpoint import Endpoint
from bench.procstat import loaded_event_loop
from tests.support.ports import free_port


def make_app(body: bytes) -> web.Application:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", answer)
    return app


def _new_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop if uvloop is importable, else the default asyncio loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--body", type=Path, required=True)
    args = parser.parse_args(argv)
    web.run_app(
        make_app(args.body.read_bytes()),
        host="127.0.0.1",
        port=args.port,
        access_log=None,
        print=None,
        loop=_new_loop(),
    )


@contextlib.contextmanager
def running_ceiling(body: bytes, work_dir: Path) -> Iterator[Endpoint]:
    """Start the ceiling server serving ``body``; yields its Endpoint."""
    work_dir.mkdir(parents=True, exist_ok=True)
    body_file = work_dir / "body.json"
    body_file.write_bytes(body)
    port = free_port()
    log = work_dir / "ceiling.log"
    process = processes.spawn(
        [sys.executable, "-m", "bench.ceiling", "--port", str(port), "--body", str(body_file)], log
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url + "/", timeout=2) as r:
                return bool(r.status == 200 and r.read() == body)

        processes.wait_until(ready, 30, "the ceiling server", lambda: process.poll() is None)
        yield Endpoint(
            system="ceiling",
            variant="bare-aiohttp",
            base_url=url,
            pid=process.pid,
            event_loop=loaded_event_loop(process.pid),
            log_path=log,
        )
    finally:
        processes.stop(process)


if __name__ == "__main__":
    main()
