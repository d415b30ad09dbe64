"""A clock the operator's unit tests set by hand (``clock.now = ...``)."""

from __future__ import annotations


class Clock:
    """Returns ``now``, which only the test moves."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
