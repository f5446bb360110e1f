"""CPU cost of the encryption on the read path: opening a sealed metadata copy and a data-key
cache hit, per call, for metadata documents of several sizes.

    .venv/bin/python bench/envelope.py [--iterations 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cedarberg.kms.envelope import Binding, open_sealed, seal
from cedarberg.kms.keyring import KeyRing
from cedarberg.kms.settings import KmsSettings


def per_call_us(label: str, iterations: int, call: object) -> None:
    assert callable(call)
    start = time.perf_counter()
    for _ in range(iterations):
        call()
    elapsed = time.perf_counter() - start
    print(f"{label:<40} {elapsed / iterations * 1e6:8.1f} µs")


async def cache_hit_us(iterations: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ring = KeyRing.open(KmsSettings(), Path(tmp) / "kms")
        context = {"warehouse": "w", "kind": "table", "object": str(uuid.uuid4())}
        key = await ring.new_data_key(context)
        start = time.perf_counter()
        for _ in range(iterations):
            await ring.unwrap(key.wrapped, context)
        elapsed = time.perf_counter() - start
        await ring.aclose()
    print(f"{'data key cache hit (KeyRing.unwrap)':<40} {elapsed / iterations * 1e6:8.1f} µs")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=20000)
    args = parser.parse_args()
    key = os.urandom(32)
    binding = Binding("default", "table", str(uuid.uuid4()), 7)
    for size in (3_000, 30_000, 300_000):
        document = os.urandom(size)
        sealed = seal(key, document, binding)
        per_call_us(f"seal {size // 1000} KB", args.iterations, lambda d=document: seal(key, d, binding))
        per_call_us(f"open {size // 1000} KB", args.iterations, lambda s=sealed: open_sealed(key, s, binding))
    asyncio.run(cache_hit_us(args.iterations))


if __name__ == "__main__":
    main()
