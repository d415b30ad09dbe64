"""``python -m tpfabric_operator``: run the TensorParallelJob operator (kopf) for all namespaces.

``--kubeconfig`` points at a cluster from outside it; inside a pod the service account is used.
Liveness is served on ``--liveness`` (default ``http://0.0.0.0:8080/healthz``, kopf's own);
``/metrics`` on ``--metrics-port`` (HTTPS, only to a caller the API server authorizes:
:mod:`tpfabric_kube.metrics_server`). Replicas elect
the one that acts by a Lease (``--leader-elect``, on by default; :mod:`.leadership`); SIGTERM
releases it, so that another replica takes over at once.
"""

from __future__ import annotations

import argparse
import functools
import getpass
import os
import socket

from tpfabric_kube.leader_election import add_timing_flags, check_timing_flags
from tpfabric_kube.metrics_server import (
    add_metrics_flags,
    check_metrics_flags,
    start_metrics_server,
)
from tpfabric_kube.structured_logs import add_log_flags, configure_logging

try:  # the TPFABRIC_* knobs, read once: a value it cannot use stops it here, in one line
    from tpfabric_operator import settings
except ValueError as err:
    raise SystemExit(f"tpfabric-operator: {err}") from None


#: the metrics port (kopf's liveness is on 8080)
METRICS_PORT = 8443


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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Return the operator's flags (exits with the reason on a bad one)."""
    parser = argparse.ArgumentParser(prog="tpfabric-operator", description=__doc__)
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz")
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only these namespaces (repeatable; default: all)",
    )
    add_log_flags(parser, level=settings.LOG_LEVEL)
    election = parser.add_argument_group("leader election (a Lease): only its holder acts")
    election.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="act only while holding the lease (default; --no-leader-elect: one replica only)",
    )
    election.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE") or "tpfabric-system",
        help="namespace of the lease (default env POD_NAMESPACE, else tpfabric-system)",
    )
    election.add_argument("--lease-name", default="tpfabric-operator", help="name of the lease")
    election.add_argument(
        "--identity",
        help="holder identity, unique per process (default: env POD_ID, else user@host, and a "
        "random suffix)",
    )
    add_timing_flags(election, "acting")
    add_metrics_flags(parser, default_port=METRICS_PORT)
    args = parser.parse_args(argv)
    check_timing_flags(parser, args)
    check_metrics_flags(parser, args)
    return args


def main(argv: list[str] | None = None) -> None:
    """Parse flags and run the operator until SIGTERM."""
    args = parse_args(argv)
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig
    os.environ["POD_ID"] = operator_identity()
    configure_logging("operator", args.log_level, args.log_format)
    import kopf  # noqa: PLC0415 - after KUBECONFIG is set: kopf logs in on start

    # importing registers every handler of the operator (the nodes', the gangs', the jobs')
    from tpfabric_operator import handlers, leadership  # noqa: PLC0415
    from tpfabric_operator.jobs import metrics as job_metrics  # noqa: PLC0415
    from tpfabric_operator.jobs.reconcile import reconcile_every_job  # noqa: PLC0415

    # the jobs' state, made here for the Lease's election and handed to kopf's memo
    state = handlers.new_state()
    start_metrics_server(
        args,
        lambda: state.kube.core.api_client,
        component="operator",
        registries=[job_metrics.REGISTRY],
    )
    if args.leader_elect:
        leadership.start(
            state.kube.coordination,
            args.lease_namespace,
            args.lease_name,
            args.identity or leadership.identity(os.environ["POD_ID"]),
            lease_seconds=args.lease_seconds,
            renew_seconds=args.renew_seconds,
            retry_seconds=args.retry_seconds,
            on_leading=functools.partial(reconcile_every_job, state),
        )
    kopf.run(
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness,
        memo=kopf.Memo(state=state),
    )


if __name__ == "__main__":
    main()
