"""The bound on plans computing at once in this process: a slot is taken without waiting or
refused (the caller answers "busy"), so no queue of waiting plans can build up."""

from __future__ import annotations


class Slots:
    """Used from the event loop only (no lock needed)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.in_use = 0

    def try_acquire(self) -> bool:
        if self.in_use >= self.capacity:
            return False
        self.in_use += 1
        return True

    def release(self) -> None:
        if self.in_use <= 0:
            raise RuntimeError("released a plan slot that was not taken")
        self.in_use -= 1
