"""Entry point of the ``tpfabric`` command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tpfabric_cli.bench import app as bench_app
from tpfabric_cli.diagnose import diagnose_command
from tpfabric_cli.errors import user_errors
from tpfabric_cli.explain import explain_command
from tpfabric_cli.queue import queue_command
from tpfabric_cli.topology import app as topology_app
from tpfabric_cli.uninstall import uninstall_cleanup_command
from tpfabric_core.errors import InputError
from tpfabric_core.fabric_description import (
    FabricDescription,
    parse_fabric_description,
    uniform_fabric,
)

app = typer.Typer(no_args_is_help=True, help="Topology-aware placement for tensor-parallel jobs.")
cluster_app = typer.Typer(no_args_is_help=True, help="The local control plane (kwok GPU nodes).")
toolchain_app = typer.Typer(no_args_is_help=True, help="Kubernetes, etcd, kwok and helm binaries.")
app.add_typer(cluster_app, name="cluster")
app.add_typer(toolchain_app, name="toolchain")
crds_app = typer.Typer(no_args_is_help=True, help="The generated CustomResourceDefinitions.")
app.add_typer(crds_app, name="crds")
docs_app = typer.Typer(no_args_is_help=True, help="The generated reference pages of docs/.")
app.add_typer(docs_app, name="docs")
metrics_app = typer.Typer(no_args_is_help=True, help="The components' Prometheus metrics.")
app.add_typer(metrics_app, name="metrics")
app.add_typer(topology_app, name="topology")
app.add_typer(bench_app, name="bench")

_REPO = Path(__file__).resolve().parents[2]
#: Where the generated CRD lives: the repo's crds/ and the Helm chart's copy of it.
REPO_CRD_FOLDERS = (_REPO / "crds", _REPO / "charts" / "tpfabric" / "files" / "crds")

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

NameOption = Annotated[str, typer.Option("--name", help="Cluster name (its state folder).")]


def load_fabric(path: Path) -> FabricDescription:
    """Return the fabric described in ``path``; InputError naming the file when unreadable."""
    try:
        text = path.read_text()
    except OSError as err:
        raise InputError(str(path), f"cannot read fabric file: {err.strerror}") from err
    return parse_fabric_description(text, source=str(path))


def _progress(line: str) -> None:
    err_console.print(f"[dim]{line}[/]")


@toolchain_app.command("build")
@user_errors
def toolchain_build(
    minimum: Annotated[
        bool,
        typer.Option(
            "--minimum",
            help="Also build the control plane at the oldest Kubernetes the chart supports "
            "(the version-skew check of the integration tier).",
        ),
    ] = False,
    controllers: Annotated[
        bool,
        typer.Option(
            "--controllers",
            help="Also build the LeaderWorkerSet and JobSet controllers (the integration tier's "
            "gangs made by other controllers).",
        ),
    ] = False,
    kueue: Annotated[
        bool,
        typer.Option("--kueue", help="Also build Kueue (the integration tier's queueing tests)."),
    ] = False,
    promtool: Annotated[
        bool,
        typer.Option(
            "--promtool",
            help="Also build Prometheus's promtool (the integration tier's tests of the chart's "
            "alert rules and its lint of the components' metrics).",
        ),
    ] = False,
) -> None:
    """Build (or find) every binary the local control plane needs; cached per version."""
    from tpfabric_localcluster.toolchain import (  # noqa: PLC0415
        BINARIES,
        CONTROLLER_BINARIES,
        KUEUE_BINARIES,
        PROMTOOL_BINARIES,
        ensure_minimum_toolchain,
        ensure_toolchain,
    )

    wanted = (
        *BINARIES,
        *(KUEUE_BINARIES if kueue else ()),
        *(CONTROLLER_BINARIES if controllers else ()),
        *(PROMTOOL_BINARIES if promtool else ()),
    )
    toolchain = ensure_toolchain(wanted, log=_progress)
    if minimum:
        oldest = ensure_minimum_toolchain(log=_progress)
        for name in ("kube-apiserver", "kube-scheduler", "kube-controller-manager"):
            console.print(f"{name + ' (minimum)':<34} {oldest.path(name)}")
    for name, path in toolchain.paths.items():
        console.print(f"{name:<24} {path}")


@toolchain_app.command("show")
@user_errors
def toolchain_show() -> None:
    """Show where each binary comes from and which are missing."""
    from tpfabric_localcluster.toolchain import find_toolchain  # noqa: PLC0415

    toolchain = find_toolchain()
    table = Table("binary", "path")
    for name, path in toolchain.paths.items():
        table.add_row(name, str(path) if path else "[red]missing[/] (run `make toolchain`)")
    console.print(table)
    console.print("pinned: " + ", ".join(f"{k} {v}" for k, v in toolchain.versions.items()))


def generated_pages() -> dict[Path, str]:
    """Return the reference pages ``tpfabric docs generate`` writes, by path, as they must be."""
    from tpfabric_cli.reference import render_cli_reference, render_values_reference  # noqa: PLC0415

    chart = _REPO / "charts" / "tpfabric"
    values = (chart / "values.yaml").read_text()
    schema = (chart / "values.schema.json").read_text()
    return {
        _REPO / "docs" / "cli-reference.md": render_cli_reference(typer.main.get_command(app)),
        _REPO / "docs" / "chart-values.md": render_values_reference(values, schema),
    }


def _write_or_check(path: Path, text: str, command: str, *, check: bool) -> bool:
    """Write ``text`` to the generated file ``path``, or with ``check`` only compare; return
    whether it was stale (said on stderr, naming ``command``, the one that makes it)."""
    if check:
        if not path.exists() or path.read_text() != text:
            err_console.print(f"{path} is stale: run `{command}`")
            return True
        console.print(f"{path} is current")
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    console.print(f"wrote {path}")
    return False


@docs_app.command("generate")
@user_errors
def docs_generate(
    check: Annotated[
        bool, typer.Option(help="Only check that the pages are current; exit 1 when stale.")
    ] = False,
) -> None:
    """Write the CLI reference and the chart values reference (docs/cli-reference.md,
    docs/chart-values.md) from the commands and from values.yaml."""
    pages = generated_pages().items()
    stale = [_write_or_check(p, t, "tpfabric docs generate", check=check) for p, t in pages]
    if any(stale):
        raise typer.Exit(1)


@crds_app.command("generate")
@user_errors
def crds_generate(
    out: Annotated[
        list[Path] | None,
        typer.Option(help="Folder to write into (repeatable); default: crds/ and the chart."),
    ] = None,
    check: Annotated[
        bool, typer.Option(help="Only check that the files are current; exit 1 when stale.")
    ] = False,
) -> None:
    """Write the CRDs (TensorParallelJob, Gang) and the chart's fabric.profile schema generated
    from the pydantic models."""
    from tpfabric_core.api.crd import crd_files  # noqa: PLC0415

    files = {folder / name: text for folder in out or list(REPO_CRD_FOLDERS)
             for name, text in crd_files().items()}  # fmt: skip
    if out is None:  # the chart's fabric.profile schema and the references, beside the CRDs
        from tpfabric_core.api.reference import (  # noqa: PLC0415
            render_gang_reference,
            render_reference,
        )
        from tpfabric_core.fabric_profile import with_values_schema  # noqa: PLC0415

        values_schema = _REPO / "charts" / "tpfabric" / "values.schema.json"
        files[values_schema] = with_values_schema(values_schema.read_text())
        files[_REPO / "docs" / "crd-reference.md"] = render_reference()
        files[_REPO / "docs" / "gang-reference.md"] = render_gang_reference()
    stale = [_write_or_check(p, t, "tpfabric crds generate", check=check) for p, t in files.items()]
    if any(stale):
        raise typer.Exit(1)


@metrics_app.command("reference")
@user_errors
def metrics_reference(
    check: Annotated[
        bool, typer.Option(help="Only check that docs/metrics.md is current; exit 1 when stale.")
    ] = False,
) -> None:
    """Write docs/metrics.md, the reference of every component's metrics, from the code."""
    from tpfabric_cli.metrics_reference import render_reference  # noqa: PLC0415

    page = _REPO / "docs" / "metrics.md"
    if _write_or_check(page, render_reference(), "tpfabric metrics reference", check=check):
        raise typer.Exit(1)


@cluster_app.command("up")
@user_errors
def cluster_up(
    *,
    name: NameOption = "tpfabric",
    fabric: Annotated[
        Path | None, typer.Option(help="Fabric description YAML (see examples/fabrics/).")
    ] = None,
    nodes: Annotated[
        int | None, typer.Option(min=0, help="Generate a regular fabric of N nodes instead.")
    ] = None,
    scheduler_config: Annotated[
        Path | None, typer.Option(help="KubeSchedulerConfiguration for kube-scheduler.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for health.")] = 120.0,
    gangs: Annotated[
        bool,
        typer.Option(
            "--gangs",
            help="Also run tpfabric (placer and scheduler, operator, gang webhook) and the "
            "LeaderWorkerSet and JobSet controllers: `kubectl apply -f examples/gangs/` runs "
            "(needs `tpfabric toolchain build --controllers`).",
        ),
    ] = False,
) -> None:
    """Start etcd, kube-apiserver, controller-manager, scheduler and kwok; create fake nodes;
    with --gangs, tpfabric and the controllers of other gangs too."""
    from tpfabric_localcluster.cluster import LocalCluster, api_client  # noqa: PLC0415
    from tpfabric_localcluster.nodes import apply_fake_nodes, wait_ready  # noqa: PLC0415

    if fabric is not None and nodes is not None:
        raise InputError("--fabric/--nodes", "give one of --fabric and --nodes, not both")
    description = load_fabric(fabric) if fabric else (uniform_fabric(nodes) if nodes else None)
    cluster = LocalCluster(name, log=_progress)
    cluster.up(scheduler_config=scheduler_config, timeout=timeout)
    if description is not None:
        try:
            with api_client(cluster.kubeconfig) as api:
                names = apply_fake_nodes(api, description)
                wait_ready(api, names, timeout=timeout)
        except BaseException:
            cluster.down()
            raise
        console.print(f"{len(names)} fake GPU nodes Ready ({description.name})")
    if gangs:
        from tpfabric_localcluster.gangs_stack import start_gangs  # noqa: PLC0415

        try:
            start_gangs(cluster)
        except BaseException:
            cluster.down()
            raise
        console.print(
            "tpfabric (placer, scheduler, operator, gang webhook) and the LeaderWorkerSet and "
            "JobSet controllers run: kubectl apply -f examples/gangs/"
        )
    console.print(f"export KUBECONFIG={cluster.kubeconfig}")


@cluster_app.command("down")
@user_errors
def cluster_down(
    name: NameOption = "tpfabric",
    keep_logs: Annotated[Path | None, typer.Option(help="Copy the logs here first.")] = None,
) -> None:
    """Stop exactly the processes `up` started and remove the cluster's state."""
    from tpfabric_localcluster.cluster import LocalCluster  # noqa: PLC0415

    if LocalCluster(name).down(keep_logs=keep_logs):
        console.print(f"cluster {name!r} is down")
    else:
        console.print(f"no cluster {name!r}")


@cluster_app.command("status")
@user_errors
def cluster_status(name: NameOption = "tpfabric") -> None:
    """Show each component; exit 1 with the log tail of any that crashed."""
    from tpfabric_localcluster.cluster import LocalCluster  # noqa: PLC0415

    cluster = LocalCluster(name)
    status = cluster.status()
    if not status:
        console.print(f"no cluster {name!r}")
        raise typer.Exit(1)
    table = Table("component", "state")
    for component, state in status.items():
        table.add_row(component, state if state != "NOT RUNNING" else f"[red]{state}[/]")
    console.print(table)
    console.print(f"kubeconfig: {cluster.kubeconfig}")
    crashes = cluster.crashed()
    for report in crashes:
        err_console.print(report)
    if crashes:
        raise typer.Exit(1)


@app.command("demo")
@user_errors
def demo(
    fabric: Annotated[Path, typer.Option(help="Fabric description YAML.")] = Path(
        "examples/fabrics/small.yaml"
    ),
    out: Annotated[
        Path,
        typer.Option(
            help="Folder for the pictures: demo-fabric and demo-placement, as PNG and SVG."
        ),
    ] = Path("out"),
    seed: Annotated[
        int, typer.Option(help="Seed of the background load: which nodes other tenants hold.")
    ] = 7,
    keep: Annotated[bool, typer.Option(help="Leave the cluster up afterwards.")] = False,
) -> None:
    """tpfabric end to end on the local control plane: the same job under the default scheduler
    and as a TensorParallelJob on a shared cluster, the example jobs placed and explained."""
    from tpfabric_cli.demo import run_demo  # noqa: PLC0415

    run_demo(load_fabric(fabric), keep=keep, console=console, log=_progress, out=out, seed=seed)


app.command("explain")(explain_command)
app.command("queue")(queue_command)
app.command("diagnose")(diagnose_command)
app.command("uninstall-cleanup")(uninstall_cleanup_command)
