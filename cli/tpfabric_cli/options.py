"""Options more than one command takes, defined once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["KubeconfigOpt"]

#: the cluster a command reads or writes
KubeconfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig", metavar="FILE",
        help="Kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster).",
    ),
]  # fmt: skip
