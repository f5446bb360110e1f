"""Which gateway tokens (and remembered verifications) of an API key are still good: the key's
newest generation, and, during a rotation's overlap window, the generation before it.

A key's generation is bumped by every rotation and revocation (`gateway.authn.key_store`). A
rotation may keep the previous secret working until the overlap ends; everything that secret
proved (gateway tokens of generation - 1, issued before the rotation or with the previous secret
during the overlap) is good until then too, and never after. A revocation, or a rotation without
overlap, ends every older generation at once. Only one previous generation is ever admitted: a
second rotation during an overlap ends the first previous secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cedarberg.gateway.authn.key_record import ApiKeyRecord


@dataclass(frozen=True, slots=True)
class Cutoff:
    """The newest generation of a key and until when (epoch seconds) generation - 1 is admitted."""

    generation: int
    previous_until: float | None = None

    @classmethod
    def of(cls, generation: int, previous_until: datetime | None) -> Cutoff:
        return cls(generation, None if previous_until is None else previous_until.timestamp())

    @classmethod
    def of_record(cls, record: ApiKeyRecord) -> Cutoff:
        return cls.of(record.generation, record.previous_secret_until)

    def admits(self, generation: int, now: float) -> bool:
        """Whether a token of `generation` is good at `now` (wall-clock epoch seconds)."""
        if generation >= self.generation:
            return True
        return (
            generation == self.generation - 1
            and self.previous_until is not None
            and now < self.previous_until
        )
