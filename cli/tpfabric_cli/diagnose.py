"""``tpfabric diagnose JOB``: which slow rank sits on which link, and what that link counted.

The join is :mod:`tpfabric_core.diagnose.diagnosis`'s; this module reads its inputs and prints:

- the job (a TensorParallelJob or a Gang record) and its pods, as ``tpfabric explain`` reads
  them; each pod's GPU -> HCA pairing from its ``rdma-init`` termination message (plain read
  rights on pods, no exec);
- the job's nodes: their link timelines (``topology.tpfabric.io/link-timeline``), health and
  conditions, and when the API server recorded the fabric agent's last write (to check the
  agent's clock);
- ``--fabric FILE``: an ``ibnetdiscover`` dump (a port GUID -> its leaf switch port -> the
  leaf's uplinks) or a fabric description (YAML: the rail's leaf, no port numbers);
- what the job says, from files: ``--nccl-ras FILE`` (``ncclras -f json``), ``--nccl-inspector
  FILE_OR_DIR`` (repeatable), ``--straggler-report FILE`` (repeatable; nvidia-resiliency-ext),
  ``--serve-trace FILE`` (``tpfabric bench serve --trace``); or ``--from-pods``: the same files
  where the job writes them in its pods' shared volume (:data:`POD_FILES`, read through the exec
  API: needs ``create`` on ``pods/exec``).

Exit codes: 0 a diagnosis was made (whatever it found), 1 the cluster could not be read, 2 bad
input (a file, a flag, an input of another job), each with one line that says what to fix.
Nothing here writes to the cluster.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from tpfabric_cli.errors import user_errors
from tpfabric_cli.explain import JobKind, _kind_info, read_subject
from tpfabric_core.diagnose.diagnosis import (
    DiagnoseOptions,
    Diagnosis,
    JobInputs,
    NodeFacts,
    diagnose,
)
from tpfabric_core.diagnose.nccl_inspector import parse_nccl_inspector
from tpfabric_core.diagnose.nccl_ras import parse_nccl_ras
from tpfabric_core.diagnose.rank_map import job_ranks
from tpfabric_core.diagnose.serve_trace import ServeTarget, parse_serve_trace
from tpfabric_core.diagnose.straggler_report import parse_straggler_report
from tpfabric_core.errors import InputError
from tpfabric_core.fabric.link_publish import AGENT_FIELD_MANAGER
from tpfabric_core.fabric.model import Fabric
from tpfabric_core.input_limits import MAX_FILE_BYTES

if TYPE_CHECKING:
    from kubernetes import client

__all__ = ["POD_FILES", "diagnose_command", "node_facts", "print_diagnosis"]

#: where a job writes what diagnose --from-pods reads, in its pods' shared volume
POD_FILES = {
    "nccl-ras": "/tpfabric/diagnose/nccl-ras.json",
    "nccl-inspector": "/tpfabric/diagnose/nccl-inspector",
    "straggler": "/tpfabric/diagnose/straggler.log",
}
_TIMEOUT_S = 30.0
_KIND_WORDS = {
    "link": "[bold red]link[/]",
    "uplink": "[bold red]uplink[/]",
    "congestion": "[yellow]congestion[/]",
    "contract": "[bold red]contract[/]",
    "not-the-network": "[bold green]not the network[/]",
    "unknown": "[yellow]unknown[/]",
}

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


# -- reading -------------------------------------------------------------------------------------


def _text(path: Path, flag: str) -> str:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise InputError(f"{flag} {path}", f"larger than the {MAX_FILE_BYTES} bytes read")
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise InputError(f"{flag} {path}", f"cannot read it: {error.strerror}") from error


def load_fabric(path: Path) -> Fabric:
    """Return the fabric of an ``ibnetdiscover`` dump, or of a fabric description (``.yaml``)."""
    text = _text(path, "--fabric")
    if path.suffix.lower() in (".yaml", ".yml"):
        from tpfabric_core.fabric.builder import fabric_from_description  # noqa: PLC0415
        from tpfabric_core.fabric_description import parse_fabric_description  # noqa: PLC0415

        return fabric_from_description(parse_fabric_description(text, source=str(path)))
    from tpfabric_core.fabric.ibnetdiscover import parse_ibnetdiscover  # noqa: PLC0415

    fabric, _ = parse_ibnetdiscover(text, str(path))
    return fabric


def _inspector_files(paths: Sequence[Path]) -> list[tuple[str, str]]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file())
        else:
            files.append(path)
    if not files:
        raise InputError("--nccl-inspector", "no file in " + ", ".join(map(str, paths)))
    return [(str(p), _text(p, "--nccl-inspector")) for p in files]


def _trace(path: Path, label: str | None) -> ServeTarget:
    trace = parse_serve_trace(_text(path, "--serve-trace"), str(path))
    if label is None:
        if len(trace.targets) > 1:
            labels = ", ".join(t.label for t in trace.targets)
            raise InputError(
                f"--serve-trace {path}",
                f"it holds {len(trace.targets)} endpoints ({labels})",
                "pass --serve-label with the one of this job",
            )
        return trace.targets[0]
    for target in trace.targets:
        if target.label == label:
            return target
    raise InputError("--serve-label", f"no endpoint labelled {label!r} in {path}")


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    """Return what diagnose reads of a Node (as the API serves it, camelCase)."""
    metadata, status = node.get("metadata") or {}, node.get("status") or {}
    conditions = {
        str(c.get("type")): {k: str(c.get(k) or "") for k in ("status", "reason", "message")}
        for c in status.get("conditions") or []
        if isinstance(c, Mapping)
    }
    written = None
    for entry in metadata.get("managedFields") or []:
        if (
            isinstance(entry, Mapping)
            and entry.get("manager") == AGENT_FIELD_MANAGER
            and not entry.get("subresource")
            and isinstance(entry.get("time"), str)
        ):
            written = _rfc3339(entry["time"])
    return NodeFacts(
        name=str(metadata.get("name") or ""),
        labels=dict(metadata.get("labels") or {}),
        annotations=dict(metadata.get("annotations") or {}),
        conditions=conditions,
        agent_written=written,
    )


def _rfc3339(text: str) -> float | None:
    from datetime import datetime  # noqa: PLC0415

    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _read_nodes(core: client.CoreV1Api, names: Sequence[str]) -> dict[str, NodeFacts]:
    """Return each named node that exists (a node gone since is left out: its ranks are then
    reported as unknown)."""
    from kubernetes.client.rest import ApiException  # noqa: PLC0415

    found = {}
    for name in sorted(set(names)):
        try:
            node = core.read_node(name, _request_timeout=_TIMEOUT_S)
        except ApiException as error:
            if error.status == 404:
                continue
            raise RuntimeError(
                f"reading node {name}: API server answered {error.status}"
            ) from error
        found[name] = node_facts(core.api_client.sanitize_for_serialization(node))
    return found


def _from_pods(
    core: client.CoreV1Api, pods: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, list[tuple[str, str]]], list[str]]:
    """Return the files each kind has in the running pods' shared volumes (source, text), and a
    line per file that could not be read."""
    from tpfabric_cli.nccl_view import _exec_cat  # noqa: PLC0415

    found: dict[str, list[tuple[str, str]]] = {kind: [] for kind in POD_FILES}
    missing: list[str] = []
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        name, namespace = str(metadata.get("name")), str(metadata.get("namespace") or "default")
        container = str((spec.get("containers") or [{}])[0].get("name") or "")
        for kind, path in POD_FILES.items():
            target = f"{path}/*" if kind == "nccl-inspector" else path
            try:
                text = _exec_cat(core, namespace, name, container, target)
            except RuntimeError as error:
                missing.append(f"pod {name}: {path}: {error}")
                continue
            if text.strip():
                found[kind].append((f"pod {name}:{path}", text))
    return found, missing


# -- printing ------------------------------------------------------------------------------------


def print_diagnosis(diagnosis: Diagnosis, console: Console) -> None:
    """Print the diagnosis: the job and window, the inputs, the clocks, the findings, and each
    looked-at rank's path when it is not in a finding already."""
    start, end = (time.strftime("%H:%M:%S", time.gmtime(t)) for t in diagnosis.window)
    console.print(f"[bold]{escape(diagnosis.job)}[/] · window {start}-{end} UTC "
                  f"({escape(diagnosis.window_source)})")  # fmt: skip
    for line in diagnosis.inputs:
        console.print(f"  input: {escape(line)}")
    for line in diagnosis.clocks:
        console.print(f"  [yellow]clock:[/] {escape(line)}")
    if not diagnosis.findings:
        console.print("no finding: no rank was looked at (no job-side input names a slow rank)")
    for finding in diagnosis.findings:
        kind = _KIND_WORDS.get(finding.kind, finding.kind)
        text = escape(finding.text)
        if finding.text.startswith(finding.kind.replace("-", " ")):
            console.print(f"{kind}{text[len(finding.kind) :]}")  # the text names its kind
        else:
            console.print(f"{kind}: {text}")
    for path in diagnosis.paths:
        if path.why and not path.why[0].startswith("looked at:"):
            console.print(f"  rank {path.rank.rank}: {escape('; '.join(path.why))}")
    named = {rank for finding in diagnosis.findings for rank in finding.ranks}
    rest = [p for p in diagnosis.paths if p.rank.rank not in named]
    if rest:
        console.print(
            f"  the other {len(rest)} ranks' ports counted no burst in the window (--json gives "
            "every rank's path)"
        )


# -- the command ---------------------------------------------------------------------------------


@user_errors
def diagnose_command(
    name: Annotated[str, typer.Argument(metavar="JOB", help="The TensorParallelJob or Gang.")],
    *,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", help="Its namespace (default: the context's)."),
    ] = None,
    kind: Annotated[
        JobKind | None, typer.Option("--kind", help="tpj or gang; default: whichever exists.")
    ] = None,
    kubeconfig: Annotated[
        Path | None, typer.Option("--kubeconfig", metavar="FILE", help="Kubeconfig.")
    ] = None,
    fabric: Annotated[
        Path | None,
        typer.Option(
            "--fabric",
            metavar="FILE",
            help="ibnetdiscover dump (port GUID -> leaf switch port -> uplinks) or fabric "
            "description (.yaml).",
        ),
    ] = None,
    nccl_ras: Annotated[
        Path | None, typer.Option("--nccl-ras", metavar="FILE", help="ncclras -f json output.")
    ] = None,
    nccl_inspector: Annotated[
        list[Path] | None,
        typer.Option("--nccl-inspector", metavar="FILE|DIR", help="NCCL Inspector output."),
    ] = None,
    straggler_report: Annotated[
        list[Path] | None,
        typer.Option(
            "--straggler-report", metavar="FILE", help="nvidia-resiliency-ext straggler report."
        ),
    ] = None,
    serve_trace: Annotated[
        Path | None,
        typer.Option("--serve-trace", metavar="FILE", help="tpfabric bench serve --trace FILE."),
    ] = None,
    serve_label: Annotated[
        str | None, typer.Option("--serve-label", help="The trace's endpoint of this job.")
    ] = None,
    from_pods: Annotated[
        bool,
        typer.Option(
            "--from-pods",
            help="Also read the job's own reports from its pods' shared volume "
            "(/tpfabric/diagnose/: nccl-ras.json, nccl-inspector/, straggler.log; exec API).",
        ),
    ] = False,
    window: Annotated[
        float,
        typer.Option(
            "--window", min=1, help="Seconds looked back without a trace or Inspector records."
        ),
    ] = 900.0,
    max_skew: Annotated[
        float,
        typer.Option(
            "--max-skew", min=0, help="Clock disagreement allowed when lining times up, seconds."
        ),
    ] = 2.0,
    trace_clock_offset: Annotated[
        float | None,
        typer.Option(
            "--trace-clock-offset",
            help="Seconds to add to the trace's times (its client's clock runs that far behind).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the same facts as JSON.")] = False,
) -> None:
    """Join each slow rank to the link it uses (rank -> pod -> node -> GPU -> HCA port -> leaf
    switch port -> uplinks) and say what each hop counted, lined up with the job's slow times."""
    from tpfabric_cli.kube_nodes import node_api  # noqa: PLC0415

    paths = FabricFromFlag(fabric)
    ras_texts = [(str(nccl_ras), _text(nccl_ras, "--nccl-ras"))] if nccl_ras else []
    inspector_texts = _inspector_files(nccl_inspector) if nccl_inspector else []
    straggler_texts = [(str(p), _text(p, "--straggler-report")) for p in straggler_report or []]
    trace = _trace(serve_trace, serve_label) if serve_trace is not None else None
    obj, pods = read_subject(kubeconfig, namespace, name, kind)
    chosen = JobKind.GANG if obj.get("kind") == _kind_info(JobKind.GANG).kind else JobKind.TPJ
    ranks = job_ranks(pods, _kind_info(chosen).rank_label)
    with node_api(kubeconfig) as core:
        nodes = _read_nodes(core, [w.node for w in ranks.workers.values() if w.node])
        if from_pods:
            found, missing = _from_pods(core, pods)
            ras_texts += found["nccl-ras"][:1]
            inspector_texts += found["nccl-inspector"]
            straggler_texts += found["straggler"]
            for line in missing:
                err.print(f"[dim]{escape(line)}[/]")
    inputs = JobInputs(
        ras=parse_nccl_ras(ras_texts[0][1], ras_texts[0][0]) if ras_texts else (),
        inspector=parse_nccl_inspector(inspector_texts) if inspector_texts else (),
        inspector_source=", ".join(s for s, _ in inspector_texts[:2])
        + (f" and {len(inspector_texts) - 2} more" if len(inspector_texts) > 2 else ""),
        stragglers=tuple(parse_straggler_report(text, src) for src, text in straggler_texts),
        trace=trace,
        trace_source=str(serve_trace) if serve_trace else "",
    )
    metadata = obj.get("metadata") or {}
    job = f"{_kind_info(chosen).kind} {metadata.get('namespace')}/{metadata.get('name')}"
    options = DiagnoseOptions(
        now=time.time(), window_seconds=window, max_skew=max_skew, trace_offset=trace_clock_offset
    )
    diagnosis = diagnose(job, ranks, nodes, inputs, options, fabric=paths.fabric)
    if as_json:
        typer.echo(json.dumps(diagnosis.document(), indent=2))
    else:
        print_diagnosis(diagnosis, out)


class FabricFromFlag:
    """The ``--fabric`` file's graph, read before any cluster call (a bad file fails fast)."""

    def __init__(self, path: Path | None) -> None:
        self.fabric = load_fabric(path) if path is not None else None
