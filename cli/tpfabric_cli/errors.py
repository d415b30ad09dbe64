"""Turn the errors a user can act on into one clear line and an exit code, never a traceback.

The local control plane's errors (a missing binary, a component that crashed) are known only
where its package is installed: the production image carries the CLI without it (its
``topology label --apply`` is the discovery Job), and there the rest still maps the same.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from tpfabric_core.errors import InputError

__all__ = ["EXIT_INPUT", "EXIT_RUNTIME", "user_errors"]

EXIT_RUNTIME = 1  # a component or the environment failed
EXIT_INPUT = 2  # bad input (file, flag) or a missing binary: the message says what to fix

P = ParamSpec("P")
R = TypeVar("R")
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def _local_cluster_errors() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """Return the local control plane's (input errors, runtime errors); none without it."""
    try:
        from tpfabric_localcluster.processes import ComponentCrashedError  # noqa: PLC0415
        from tpfabric_localcluster.toolchain import MissingBinaryError  # noqa: PLC0415
    except ImportError:  # the production image: no local control plane
        return (), ()
    return (MissingBinaryError,), (ComponentCrashedError,)


def user_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Wrap a command so that known errors print ``error: …`` and exit with a documented code."""

    cluster_input, cluster_runtime = _local_cluster_errors()
    input_errors: tuple[type[Exception], ...] = (InputError, *cluster_input)
    runtime_errors: tuple[type[Exception], ...] = (
        *cluster_runtime,
        TimeoutError,
        RuntimeError,
        ValueError,
        OSError,
    )

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except typer.Exit:
            raise
        except input_errors as err:
            stderr.print(f"[bold red]error:[/] {escape(str(err))}", markup=True)
            raise typer.Exit(EXIT_INPUT) from None
        except runtime_errors as err:
            stderr.print(f"[bold red]error:[/] {escape(str(err))}", markup=True)
            raise typer.Exit(EXIT_RUNTIME) from None

    return wrapper
