"""What the purge sweeper records when one soft-deleted object cannot be purged.

A failed purge is the object's problem, never the sweep's: the object keeps its row (so its data
key survives and an admin can still undrop it), the failure is recorded on that row, and the next
attempt waits an exponentially growing, bounded delay. The due query skips objects whose next
attempt lies in the future, so an object that fails every time (a crafted manifest list, a file
the warehouse refuses to delete) cannot hold back the objects dropped after it.

The recorded message is shown to admins (the dropped listing of the admin API and the CLI), so it
names the kind of failure without quoting what an exception may carry: file contents, paths of
other objects, provider responses. The full exception goes to the gateway log.
"""

from __future__ import annotations

from dataclasses import dataclass

from cedarberg.catalog.errors import CatalogError

# Longest recorded error message; the rest is in the gateway log.
MAX_ERROR_CHARS = 300

# 2**60 times any sensible initial delay is beyond any bound: a cap on the exponent keeps the
# arithmetic in floating point's exact range however many attempts a row has recorded.
_MAX_EXPONENT = 60


@dataclass(frozen=True, slots=True)
class PurgeBackoff:
    """Delays between purge attempts of one object: `initial_seconds` after the first attempt,
    doubling after each further one, never more than `max_seconds`."""

    initial_seconds: float = 60.0
    max_seconds: float = 6 * 3600.0

    def __post_init__(self) -> None:
        if not 0 < self.initial_seconds <= self.max_seconds:
            raise ValueError("purge backoff needs 0 < initial_seconds <= max_seconds")

    def delay_ms(self, attempts: int) -> int:
        """Milliseconds to wait after the `attempts`-th attempt (1 for the first) before the next:
        initial · 2^(attempts-1), at most max. Attempts below 1 count as 1."""
        exponent = min(max(attempts - 1, 0), _MAX_EXPONENT)
        return int(min(self.max_seconds, self.initial_seconds * 2.0**exponent) * 1000)


def describe_failure(err: Exception) -> str:
    """A short message for admins naming why a purge failed, safe to show.

    The catalog's own errors carry messages written for API callers and are kept. An OSError keeps
    its reason (`strerror`) but not its file names. Anything else (a parser's error about a
    malformed manifest list, a provider SDK's error) is named by its class only: its text may quote
    the file's bytes or a remote answer."""
    if isinstance(err, CatalogError):
        text = f"{type(err).__name__}: {err}"
    elif isinstance(err, OSError):
        text = f"{type(err).__name__}: {err.strerror or 'I/O error'}"
    else:
        text = f"{type(err).__name__} while reading or deleting the object's files (see the gateway log)"
    printable = "".join(char if char.isprintable() else " " for char in text)
    if len(printable) > MAX_ERROR_CHARS:
        return printable[: MAX_ERROR_CHARS - 3] + "..."
    return printable
