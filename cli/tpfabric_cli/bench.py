"""``tpfabric bench``: run the benchmarks of ``tpfabric_bench`` (speed and memory, not tests).

Each command hands its arguments, unparsed, to the benchmark's own ``main(argv)`` (argparse), so
``tpfabric bench topology --help`` shows the benchmark's options. This module must never measure
anything itself.
"""

from __future__ import annotations

import typer

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Benchmarks: time and peak memory of the hot paths.")

_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command("topology", context_settings=_PASS_THROUGH, add_help_option=False)
def topology(ctx: typer.Context) -> None:
    """Parse, build and label a generated fabric (--nodes 4096 --rails 8 --repeat 3 --json F)."""
    from tpfabric_bench.topology import main  # noqa: PLC0415

    raise typer.Exit(main(list(ctx.args)))


@app.command("placement", context_settings=_PASS_THROUGH, add_help_option=False)
def placement(ctx: typer.Context) -> None:
    """Simulate a job trace per placer (--trace small-jobs|huge-jobs|F.csv --nodes N --plot DIR)."""
    from tpfabric_bench.placement import main  # noqa: PLC0415

    raise typer.Exit(main(list(ctx.args)))


@app.command("webhook", context_settings=_PASS_THROUGH, add_help_option=False)
def webhook(ctx: typer.Context) -> None:
    """Gang webhook admission latency over HTTPS, p50/p99 (--reviews 2000 --json F)."""
    from tpfabric_bench.webhook import main  # noqa: PLC0415

    raise typer.Exit(main(list(ctx.args)))


@app.command("extender", context_settings=_PASS_THROUGH, add_help_option=False)
def extender(ctx: typer.Context) -> None:
    """Extender latency at 1,000/5,000 nodes and scheduler pods/s (--skip-cluster --json F)."""
    from tpfabric_bench.extender import main  # noqa: PLC0415

    raise typer.Exit(main(list(ctx.args)))


@app.command("operator", context_settings=_PASS_THROUGH, add_help_option=False)
def operator(ctx: typer.Context) -> None:
    """100 TPJs at once on 1,000 kwok nodes: time to settle, CPU, memory (--json F)."""
    from tpfabric_bench.operator import main  # noqa: PLC0415

    raise typer.Exit(main(list(ctx.args)))


@app.command("queue", context_settings=_PASS_THROUGH, add_help_option=False)
def queue(ctx: typer.Context) -> None:
    """The placer with a deep queue: cycle, plan latency, CPU at 5,000/16,000 nodes (--json F)."""
    from tpfabric_bench.queue import main  # noqa: PLC0415

    raise typer.Exit(main(list(ctx.args)))


@app.command("gangs", context_settings=_PASS_THROUGH, add_help_option=False)
def gangs(ctx: typer.Context) -> None:
    """100 LWS groups x 8 pods on 1,000 kwok nodes: plain, wired, with tpfabric (--json F)."""
    from tpfabric_bench.gangs import main  # noqa: PLC0415

    raise typer.Exit(main(list(ctx.args)))


@app.command("fleet", context_settings=_PASS_THROUGH, add_help_option=False)
def fleet(ctx: typer.Context) -> None:
    """50 LWS groups x 2 roll out while training gangs come and go, 1,000 nodes (--json F)."""
    from tpfabric_bench.fleet import main  # noqa: PLC0415

    raise typer.Exit(main(list(ctx.args)))


@app.command("fabric-agent", context_settings=_PASS_THROUGH, add_help_option=False)
def fabric_agent(ctx: typer.Context) -> None:
    """Fabric agent CPU/memory per node (8 HCAs x 2 ports) and API writes/hour (--json F)."""
    from tpfabric_bench.fabric_agent import main  # noqa: PLC0415

    raise typer.Exit(main(list(ctx.args)))


@app.command("serve", context_settings=_PASS_THROUGH, add_help_option=False)
def serve(ctx: typer.Context) -> None:
    """Stream from an OpenAI-compatible endpoint: TTFT, tokens/s p50/p95/p99 (--compare URL2)."""
    from tpfabric_bench.serve import main  # noqa: PLC0415

    raise typer.Exit(main(list(ctx.args)))
