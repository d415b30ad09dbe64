"""Errors a user can act on: what is wrong, where (file, line or field path) and how to fix it."""

from __future__ import annotations

__all__ = ["InputError"]


class InputError(ValueError):
    """Bad user input. ``str()`` is one line: ``<where>: <what is wrong>[; <how to fix>]``."""

    def __init__(self, where: str, problem: str, fix: str | None = None) -> None:
        self.where = where
        self.problem = problem
        self.fix = fix
        message = f"{where}: {problem}"
        if fix:
            message += f"; {fix}"
        super().__init__(message)
