"""Microseconds per rate-limit hit, and the memory the limiter keeps, through the public API.

Three scenarios, each a bounded loop of ``--hits`` calls on one event loop (no HTTP):

- ``request``: what every authenticated request pays, `hit_address` then `hit_principal` for one
  client and one principal (µs per request and per hit);
- ``flood``: `hit_address` from ``--hits`` distinct addresses (a new key per hit), then the
  number of bytes the limiter still holds (``tracemalloc``, a separate pass);
- ``budget``: `hit_address` from one address under a budget of 100,000,000/minute (the suite's
  benchmark configuration), then the bytes the limiter holds for that one key.

    .venv/bin/python -m bench.ratelimit [--hits 200000] [--repeat 3] [--redis-url redis://...]

With ``--redis-url`` the ``request`` scenario also runs against that Redis (``--hits`` is capped
at 20,000 there: one round trip per hit). Timings are the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable

from cedarberg.gateway.config.ratelimit import RateLimitSettings
from cedarberg.gateway.ratelimit import OperationClass, RateLimiter

_REDIS_HITS = 20_000


def _addresses(count: int) -> list[str]:
    return [f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(count)]


async def _best(repeat: int, run: Callable[[], Awaitable[None]]) -> float:
    """The shortest wall time of `repeat` runs, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        await run()
        best = min(best, time.perf_counter() - started)
    return best


async def _request(settings: RateLimitSettings, hits: int, repeat: int) -> float:
    limiter = RateLimiter.open(settings)
    try:

        async def run() -> None:
            for _ in range(hits):
                await limiter.hit_address("192.0.2.1")
                await limiter.hit_principal("key:bench", OperationClass.READ)

        return await _best(repeat, run) / hits * 1e6
    finally:
        await limiter.aclose()


async def _flood(settings: RateLimitSettings, hits: int, repeat: int) -> tuple[float, int]:
    addresses = _addresses(hits)

    async def fresh_run(limiter: RateLimiter) -> None:
        for addr in addresses:
            await limiter.hit_address(addr)

    best = float("inf")
    for _ in range(repeat):
        limiter = RateLimiter.open(settings)
        gc.collect()
        started = time.perf_counter()
        await fresh_run(limiter)
        best = min(best, time.perf_counter() - started)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    limiter = RateLimiter.open(settings)
    await fresh_run(limiter)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return best / hits * 1e6, held


async def _budget(hits: int) -> int:
    settings = RateLimitSettings(per_address="100000000/minute")
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    limiter = RateLimiter.open(settings)
    for _ in range(hits):
        await limiter.hit_address("192.0.2.1")
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held


async def main(args: argparse.Namespace) -> None:
    memory = RateLimitSettings()
    per_request = await _request(memory, args.hits, args.repeat)
    print(f"memory  request: {per_request:7.2f} µs per request (2 hits), {per_request / 2:6.2f} µs a hit")
    per_hit, held = await _flood(memory, args.hits, args.repeat)
    print(
        f"memory  flood:   {per_hit:7.2f} µs a hit, {args.hits} distinct addresses, {held / 1e6:.1f} MB held"
    )
    held = await _budget(args.hits)
    print(f"memory  budget:  {args.hits} hits of one address at 100M/minute, {held / 1e6:.2f} MB held")
    if args.redis_url:
        redis = RateLimitSettings(storage_uri=args.redis_url, key_prefix=f"bench-{uuid.uuid4().hex}")
        hits = min(args.hits, _REDIS_HITS)
        per_request = await _request(redis, hits, args.repeat)
        print(f"redis   request: {per_request:7.2f} µs per request (2 hits), {per_request / 2:6.2f} µs a hit")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hits", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--redis-url", default=None, help="also measure a Redis at this URI")
    asyncio.run(main(parser.parse_args()))
