"""``python -m tpfabric_operator``: run the TensorParallelJob operator (kopf) for all namespaces.

``--kubeconfig`` points at a cluster from outside it; inside a pod the service account is used.
Liveness is served on ``--liveness`` (default ``http://0.0.0.0:8080/healthz``).
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import socket


def operator_identity() -> str:
    """Return who this operator is for kopf: ``$POD_ID``, else ``user@host`` (never raises).

    kopf derives its identity from ``getpass.getuser()`` when ``POD_ID`` is unset, which raises
    ``KeyError`` for a uid without a passwd entry -- the case of every container that runs as an
    arbitrary non-root uid (the chart's 65532, OpenShift's random uids).
    """
    if pod := os.environ.get("POD_ID"):
        return pod
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def main(argv: list[str] | None = None) -> None:
    """Parse flags and run the operator until SIGTERM."""
    parser = argparse.ArgumentParser(prog="tpfabric-operator", description=__doc__)
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz")
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only these namespaces (repeatable; default: all)",
    )
    parser.add_argument("--log-level", default=os.environ.get("TPFABRIC_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig
    os.environ["POD_ID"] = operator_identity()
    logging.basicConfig(
        level=args.log_level.upper(),
        format='{"time":"%(asctime)s","level":"%(levelname)s","logger":"%(name)s",'
        '"message":"%(message)s"}',
    )
    import kopf  # noqa: PLC0415 - after KUBECONFIG is set: kopf logs in on start

    import tpfabric_operator.handlers  # noqa: F401, PLC0415 - registers the handlers

    kopf.run(
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness,
    )


if __name__ == "__main__":
    main()
