"""KEK rotation: rewrap every stored data key under the current KEK version.

Documents are untouched — they are sealed with the data keys, which do not change; only the
wrapped form of each data key is replaced. Each replacement is a compare-and-swap on the wrapped
key, so rotation is safe while the gateway serves (commits never change a data key) and can run on
several machines at once. It is resumable: a run only looks at keys not yet under the current
version, so after an interruption the next run carries on. Sealed metadata files keep the wrapped
key they were written with; the KMS still unwraps it as long as the old KEK version is enabled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.sealing import object_context
from cedarberg.catalog.store import keys as key_rows
from cedarberg.catalog.store.keys import KeyRef


@dataclass(frozen=True, slots=True)
class RotationReport:
    kek_uri: str
    kek_version: str
    rewrapped: int
    remaining: int


def _context(ref: KeyRef) -> dict[str, str]:
    return object_context(ref.warehouse, ref.kind, ref.uuid)


async def rotate(
    ctx: CatalogContext, batch_size: int = 100, progress: Callable[[int], None] | None = None
) -> RotationReport:
    """Rewrap every data key not under the current KEK version. Raises KeyServiceUnavailableError
    if the KMS fails (what was rewrapped stays rewrapped: run again to finish)."""
    sealer = ctx.sealer
    version = await sealer.current_kek_version()
    kek_uri = sealer.keyring.kek_uri
    rewrapped = 0
    stalled: set[tuple[str, str]] = set()
    while True:
        async with ctx.store.read() as tx:
            refs = [
                ref
                for ref in await key_rows.keys_not_under(tx, kek_uri, version, batch_size + len(stalled))
                if (ref.table, ref.row_id) not in stalled
            ][:batch_size]
        if not refs:
            break
        replacements = [(ref, await sealer.rewrap(ref.wrapped, _context(ref), version)) for ref in refs]
        async with ctx.store.write() as tx:
            for ref, new in replacements:
                if new is not None and await key_rows.replace_key(tx, ref, new):
                    rewrapped += 1
                else:
                    # Rewrapped meanwhile by another run, or reported under another version: do
                    # not spin on it; the final count tells whether anything is left.
                    stalled.add((ref.table, ref.row_id))
        if progress is not None:
            progress(rewrapped)
    sealer.reset_registry_key()
    async with ctx.store.read() as tx:
        remaining = await key_rows.count_keys_not_under(tx, kek_uri, version)
    return RotationReport(kek_uri, version, rewrapped, remaining)
