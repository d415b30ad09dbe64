"""Turn the errors a user can act on into one clear line and an exit code, never a traceback."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from tpfabric_core.errors import InputError
from tpfabric_localcluster.processes import ComponentCrashedError
from tpfabric_localcluster.toolchain import MissingBinaryError

__all__ = ["EXIT_INPUT", "EXIT_RUNTIME", "user_errors"]

EXIT_RUNTIME = 1  # a component or the environment failed
EXIT_INPUT = 2  # bad input (file, flag) or a missing binary: the message says what to fix

P = ParamSpec("P")
R = TypeVar("R")
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def user_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Wrap a command so that known errors print ``error: …`` and exit with a documented code."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except typer.Exit:
            raise
        except (InputError, MissingBinaryError) as err:
            stderr.print(f"[bold red]error:[/] {escape(str(err))}", markup=True)
            raise typer.Exit(EXIT_INPUT) from None
        except (ComponentCrashedError, TimeoutError, RuntimeError, ValueError, OSError) as err:
            stderr.print(f"[bold red]error:[/] {escape(str(err))}", markup=True)
            raise typer.Exit(EXIT_RUNTIME) from None

    return wrapper
