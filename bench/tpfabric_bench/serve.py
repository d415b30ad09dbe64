"""A client that measures what users of a served model feel.

``tpfabric bench serve --endpoint URL --model NAME [--compare URL2 [--compare-model NAME2]]
[--requests 64] [--concurrency 8] [--max-tokens 256] [--prompt TEXT] [--json FILE]
[--trace FILE]``

Streams chat completions from any OpenAI-compatible endpoint (vLLM, SGLang, a hosted API) through
the ``openai`` client (``AsyncOpenAI``, ``stream=True``), ``--concurrency`` requests in flight
until ``--requests`` are done, and reports per endpoint the percentiles (p50/p95/p99) of time to
first token, inter-token latency, time per output token, end-to-end latency and each request's
decode rate, and the output tokens per second of the whole run (definitions in
:mod:`tpfabric_bench.serve_stats`), and its inter-token spikes: the p99/median ratio, the worst
ten seconds' p99, the waits over five times the median with their times, and their period when
they come on one (a network hiccup every few minutes shows as such).
``--trace FILE`` keeps every chunk's arrival in Unix seconds and each response's HTTP ``Date``
(:mod:`tpfabric_core.diagnose.serve_trace`): ``tpfabric diagnose --serve-trace FILE`` lines the
spikes up with the links' counters.
Output tokens are the server's ``usage.completion_tokens`` (asked for with ``stream_options``);
a server that gives no usage has its content chunks counted instead, and the table says so.

``--compare URL2`` measures a second endpoint in the same run with the same load, one after the
other (not at once: two groups that share a fabric would slow each other, and the client's own
CPU would be shared), and adds the ratio of each figure (second / first), e.g. a group placed
by tpfabric against one placed by the default scheduler.

Before any run, each endpoint gets one request of one token (not counted): it warms the server
up and turns what the user must fix (an endpoint that cannot be reached, an API key refused, a
model the server does not serve) into one line and exit code 2. Failures of single requests in a
run that otherwise works are counted by kind and reported; the client never retries, so that
none is hidden. Only a benchmark: nothing of the product may import it, and it asserts nothing
about timings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tpfabric_bench._harness import environment
from tpfabric_bench.serve_stats import (
    COUNTED_BY_USAGE,
    QUANTILES,
    RequestResult,
    endpoint_summary,
    ratios,
)
from tpfabric_core.diagnose.serve_trace import TracedRequest, trace_document

if TYPE_CHECKING:
    from openai import APIError, APIStatusError, AsyncOpenAI

__all__ = [
    "INSTALL_HINT",
    "Load",
    "SetupError",
    "Target",
    "comparison",
    "main",
    "measure",
    "parse_args",
    "results_table",
    "stream_one",
]

INSTALL_HINT = (
    "tpfabric bench serve needs the openai client: install with pip install 'tpfabric[serve]'"
)
DEFAULT_PROMPT = (
    "Explain, step by step and in detail, how a tensor-parallel group of GPUs exchanges "
    "activations during one forward pass of a transformer layer, and why the network links "
    "between the GPUs matter for how fast the answer streams."
)
#: delta fields that carry generated text: the answer, and the reasoning of reasoning parsers
TEXT_FIELDS = ("content", "reasoning_content", "reasoning")


@dataclass(frozen=True)
class Target:
    """An endpoint to measure: its label in the table, base URL, model, API key, and the flags
    that set them (named in the messages that ask the user to fix one)."""

    label: str
    url: str
    model: str
    api_key: str
    url_flag: str = "--endpoint"
    model_flag: str = "--model"
    key_flag: str = "--api-key"


@dataclass(frozen=True)
class Load:
    """What every endpoint is sent: ``requests`` in all, ``concurrency`` at a time, each the
    same prompt asking for at most ``max_tokens`` (all of them with ``ignore_eos``, which vLLM
    and SGLang accept); ``timeout`` seconds without an answer (to connect, or between chunks)
    fails a request."""

    requests: int = 64
    concurrency: int = 8
    max_tokens: int = 256
    prompt: str = DEFAULT_PROMPT
    timeout: float = 60.0
    ignore_eos: bool = False


class SetupError(Exception):
    """What keeps an endpoint from being measured, in one line that names the fix."""


# -- one request ----------------------------------------------------------------------------------


def _client(target: Target, load: Load) -> AsyncOpenAI:
    from openai import AsyncOpenAI  # noqa: PLC0415

    # No retries: a benchmark counts a failed request, it does not hide it behind a second try.
    return AsyncOpenAI(
        base_url=target.url, api_key=target.api_key, timeout=load.timeout, max_retries=0
    )


def _has_text(chunk: Any) -> bool:
    """Return whether a ``chat.completion.chunk`` carries generated text (the role-only first
    chunk of vLLM and the usage-only last one do not)."""
    for choice in chunk.choices:
        delta = choice.delta
        extra = delta.model_extra or {}
        if delta.content or any(extra.get(name) for name in TEXT_FIELDS[1:]):
            return True
    return False


async def stream_one(
    client: AsyncOpenAI,
    target: Target,
    load: Load,
    *,
    include_usage: bool = True,
    max_tokens: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    wall: Callable[[], float] = time.time,
) -> RequestResult:
    """Return what one streamed chat completion saw, its times read from ``clock`` as each chunk
    arrives (and dated by ``wall``, Unix seconds, read once at the send); the client library's
    errors propagate (the caller decides what they mean)."""
    from openai import omit  # noqa: PLC0415

    sent = clock()
    sent_at = wall()
    first: float | None = None
    last = sent
    gaps: list[float] = []
    chunks = 0
    usage_tokens: int | None = None
    stream = await client.chat.completions.create(
        model=target.model,
        messages=[{"role": "user", "content": load.prompt}],
        max_tokens=load.max_tokens if max_tokens is None else max_tokens,
        stream=True,
        stream_options={"include_usage": True} if include_usage else omit,
        extra_body={"ignore_eos": True} if load.ignore_eos else None,
    )
    answered_at = sent_at + (clock() - sent)
    date = _http_date(stream.response.headers.get("date"))
    arrivals: list[float] = []
    async with stream:
        async for chunk in stream:
            now = clock()
            if chunk.usage is not None:
                usage_tokens = chunk.usage.completion_tokens
            if _has_text(chunk):
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
                chunks += 1
                arrivals.append(sent_at + (now - sent))
    end = clock()
    if first is None:
        return RequestResult(error="no content", total_s=end - sent, sent_at=sent_at)
    return RequestResult(
        first_token_s=first - sent,
        last_token_s=last - sent,
        total_s=end - sent,
        tokens=chunks if usage_tokens is None else usage_tokens,
        tokens_from_usage=usage_tokens is not None,
        chunk_gaps_s=tuple(gaps),
        sent_at=sent_at,
        answered_at=answered_at,
        chunk_times=tuple(arrivals),
        date=date,
    )


def _http_date(value: str | None) -> float | None:
    """Return an HTTP ``Date`` header in Unix seconds, None when absent or unreadable."""
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def _error_kind(err: Exception) -> str:
    """Return a failed request's kind as the report counts it."""
    from openai import APIConnectionError, APIStatusError, APITimeoutError  # noqa: PLC0415

    if isinstance(err, APITimeoutError):
        return "timeout"
    if isinstance(err, APIConnectionError):
        return "connection"
    if isinstance(err, APIStatusError):
        return f"HTTP {err.status_code}"
    return type(err).__name__


async def _measured(
    client: AsyncOpenAI, target: Target, load: Load, include_usage: bool, clock: Callable[[], float]
) -> RequestResult:
    """Return one request's result, a failure of the client library counted as its kind."""
    from openai import OpenAIError  # noqa: PLC0415

    sent_at = time.time()
    try:
        return await stream_one(client, target, load, include_usage=include_usage, clock=clock)
    except (OpenAIError, ValueError) as err:  # ValueError: a chunk that is not JSON
        return RequestResult(error=_error_kind(err), sent_at=sent_at)


# -- what the user must fix -----------------------------------------------------------------------


def _server_words(err: APIError) -> str:
    """Return the server's own message in an error body (OpenAI's ``{"error": {"message"}}`` or
    vLLM's ``{"message"}``), else the client's."""
    body: Any = err.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return err.message


async def served_models(client: AsyncOpenAI) -> list[str] | None:
    """Return the model names ``GET /models`` lists, None when it cannot be read."""
    from openai import OpenAIError  # noqa: PLC0415

    try:
        return [model.id async for model in client.models.list()]
    except (OpenAIError, ValueError):
        return None


async def explain(err: Exception, client: AsyncOpenAI, target: Target, load: Load) -> str:
    """Return one line that says why the first request to ``target`` failed and what fixes it;
    a refused request other than 401/403 is checked against the served models."""
    from openai import (  # noqa: PLC0415
        APIConnectionError,
        APIStatusError,
        APITimeoutError,
        AuthenticationError,
        PermissionDeniedError,
    )

    where = f"{target.url_flag} {target.url}"
    if isinstance(err, APITimeoutError):
        return (
            f"{where} did not answer within {load.timeout:g} s: check that the server is up and "
            "has loaded the model, or raise --timeout"
        )
    if isinstance(err, APIConnectionError):
        cause = err.__cause__ or err
        return (
            f"cannot reach {where} ({type(cause).__name__}: {cause}): check the URL (the base "
            "URL, e.g. http://host:8000/v1) and that the server is running"
        )
    if isinstance(err, AuthenticationError | PermissionDeniedError):
        return (
            f"{where} refused the API key (HTTP {err.status_code}: {_server_words(err)}): pass "
            f"the right one with {target.key_flag} KEY or the environment variable OPENAI_API_KEY"
        )
    if isinstance(err, APIStatusError):
        return await _refusal(err, client, target)
    return f"{where}: {type(err).__name__}: {err}"


async def _refusal(err: APIStatusError, client: AsyncOpenAI, target: Target) -> str:
    """Return the line for a refused first request: the model, if the server lists the models
    it serves and this one is not among them; else the URL, or the server's own words."""
    where = f"{target.url_flag} {target.url}"
    served = await served_models(client)
    if served is not None and target.model not in served:
        names = ", ".join(served) or "no model at all"
        return (
            f"{where} does not serve model {target.model!r} (HTTP {err.status_code}); it "
            f"serves: {names}: pass one of them with {target.model_flag}"
        )
    if served is None and err.status_code == 404:
        return (
            f"{where} answered 404 to /chat/completions and /models: check that the URL is "
            "the base URL of an OpenAI-compatible API (it ends in /v1 for vLLM and SGLang)"
        )
    return f"{where} answered HTTP {err.status_code}: {_server_words(err)}"


async def probe(client: AsyncOpenAI, target: Target, load: Load) -> bool:
    """Send one request of one token (not counted) and return whether the server takes
    ``stream_options`` (a usage chunk); raise SetupError with what the user must fix."""
    from openai import (  # noqa: PLC0415
        BadRequestError,
        OpenAIError,
        UnprocessableEntityError,
    )

    try:
        await stream_one(client, target, load, max_tokens=1)
    except (OpenAIError, ValueError) as err:
        failed: Exception = err
    else:
        return True
    if isinstance(failed, BadRequestError | UnprocessableEntityError):
        served = await served_models(client)
        if served is None or target.model in served:
            # perhaps a server that refuses stream_options: then count content chunks instead
            try:
                await stream_one(client, target, load, include_usage=False, max_tokens=1)
            except (OpenAIError, ValueError):
                pass
            else:
                return False
    raise SetupError(await explain(failed, client, target, load))


# -- a run ----------------------------------------------------------------------------------------


async def _run(
    client: AsyncOpenAI,
    target: Target,
    load: Load,
    *,
    include_usage: bool,
    done: Callable[[], None],
    clock: Callable[[], float],
) -> tuple[list[RequestResult], float]:
    """Return the results of ``load.requests`` requests, ``load.concurrency`` at a time, and the
    seconds from the first sent to the last done."""
    pending = iter(range(load.requests))
    results: list[RequestResult] = []

    async def worker() -> None:
        for _ in pending:  # shared by the workers: each takes the next request to send
            results.append(await _measured(client, target, load, include_usage, clock))
            done()

    started = clock()
    await asyncio.gather(*(worker() for _ in range(min(load.concurrency, load.requests))))
    return results, clock() - started


async def measure(
    targets: Sequence[Target],
    load: Load,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.perf_counter,
    kept: dict[str, list[RequestResult]] | None = None,
) -> list[dict[str, Any]]:
    """Return each target's summary (label, URL, model and :func:`endpoint_summary`), the
    targets probed first, then run one after the other; raise SetupError before any run when
    one cannot be measured. ``kept``: each target's results by label, for a trace."""
    clients = [_client(target, load) for target in targets]
    try:
        usage = [await probe(c, t, load) for c, t in zip(clients, targets, strict=True)]
        summaries = []
        for client, target, include_usage in zip(clients, targets, usage, strict=True):
            task = (
                None if progress is None else progress.add_task(target.label, total=load.requests)
            )

            def done(task: Any = task) -> None:
                if progress is not None and task is not None:
                    progress.advance(task)

            results, wall = await _run(
                client, target, load, include_usage=include_usage, done=done, clock=clock
            )
            if kept is not None:
                kept[target.label] = results
            summaries.append(
                {"label": target.label, "url": target.url, "model": target.model}
                | {"server_gives_usage": include_usage}
                | endpoint_summary(results, wall)
            )
        return summaries
    finally:
        for client in clients:
            await client.close()


def comparison(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Return the ratios (second / first) and which endpoint is faster by median time to first
    token and by median decode rate (None when either has no figure or they tie)."""
    found = ratios(first, second)

    def faster(ratio: float | None, lower_is_better: bool) -> str | None:
        if ratio is None or ratio == 1:
            return None
        second_wins = ratio < 1 if lower_is_better else ratio > 1
        return str(second["label"] if second_wins else first["label"])

    return {
        "ratio": found,
        "faster": {
            "ttft_p50": faster(found["ttft_ms"].get("p50"), lower_is_better=True),
            "decode_tokens_per_s_p50": faster(
                found["decode_tokens_per_s"].get("p50"), lower_is_better=False
            ),
        },
    }


# -- the report -----------------------------------------------------------------------------------

#: the table's percentile rows: (summary key, words)
ROWS = (
    ("ttft_ms", "time to first token, ms"),
    ("itl_ms", "inter-token latency (per chunk), ms"),
    ("tpot_ms", "time per output token after the first, ms"),
    ("decode_tokens_per_s", "decode rate per request, tokens/s"),
    ("e2e_ms", "end-to-end latency, ms"),
)


def results_table(
    summaries: Sequence[dict[str, Any]], load: Load, compared: dict[str, Any] | None = None
) -> Table:
    """Return the rich table: a row per figure, a column per endpoint, and the ratio (second /
    first) when there are two."""
    columns = [f"{s['label']}\n{s['url']}\n{s['model']}" for s in summaries]
    if compared is not None:
        columns.append(f"{summaries[1]['label']} / {summaries[0]['label']}")
    table = Table(
        "",
        *columns,
        title=(
            f"Streaming chat completions: {load.requests} requests, {load.concurrency} at a time, "
            f"max_tokens {load.max_tokens}"
        ),
    )
    for column in table.columns[1:]:
        column.justify = "right"

    def times(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    table.add_row("requests ok / failed", *(f"{s['ok']} / {s['failed']}" for s in summaries))
    table.add_row(
        "output tokens (counted by)",
        *(f"{s['output_tokens']} ({s['tokens_counted_by']})" for s in summaries),
    )
    for key, words in ROWS:
        for q in QUANTILES:
            name = f"p{round(q * 100)}"
            cells = ["-" if s[key] is None else f"{s[key][name]:.1f}" for s in summaries]
            if compared is not None:
                cells.append(times(compared["ratio"][key].get(name)))
            table.add_row(f"{words} {name}", *cells)
    cells = [
        "-" if s["output_tokens_per_s"] is None else f"{s['output_tokens_per_s']:.1f}"
        for s in summaries
    ]
    if compared is not None:
        cells.append(times(compared["ratio"]["output_tokens_per_s"]))
    table.add_row("output tokens/s, all requests", *cells)
    for words, cell in SPIKE_ROWS:
        table.add_row(words, *(cell(s.get("itl_spikes")) for s in summaries))
    return table


def _ratio_cell(spikes: dict[str, Any] | None) -> str:
    ratio = (spikes or {}).get("p99_over_median")
    return "-" if ratio is None else f"{ratio:.1f}x"


def _worst_cell(spikes: dict[str, Any] | None) -> str:
    worst = (spikes or {}).get("worst_stretch")
    if not worst or worst.get("p99_over_median") is None:
        return "-"
    return f"{worst['p99_over_median']:.1f}x at {_hms(worst['start'])}"


def _spikes_cell(spikes: dict[str, Any] | None) -> str:
    if not spikes:
        return "-"
    found = len(spikes["spikes"])
    period = f", {spikes['period_words']}" if spikes["periodic"] else ""
    return f"{found}{period}" if found else "none"


def _hms(when: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(when))


#: the rows of the ITL spikes: (words, cell of an endpoint's ``itl_spikes``)
SPIKE_ROWS: tuple[tuple[str, Callable[[dict[str, Any] | None], str]], ...] = (
    ("inter-token latency p99 / median", _ratio_cell),
    ("worst 10 s: inter-token p99 / median (UTC)", _worst_cell),
    ("inter-token spikes (waits > 5x the median)", _spikes_cell),
)


def notes(summaries: Sequence[dict[str, Any]], compared: dict[str, Any] | None) -> list[str]:
    """Return the lines printed under the table: failures by kind, how tokens were counted
    where the server gave no usage, and which endpoint is faster."""
    lines = []
    for s in summaries:
        if s["errors"]:
            kinds = ", ".join(f"{kind}: {n}" for kind, n in s["errors"].items())
            lines.append(
                f"{s['label']}: {s['failed']} of {s['requests']} requests failed ({kinds})"
            )
        if s["ok"] and s["tokens_counted_by"] != COUNTED_BY_USAGE:
            lines.append(
                f"{s['label']}: where the server gave no usage, tokens are counted as "
                "content chunks (one chunk may carry several tokens)"
            )
    for s in summaries:
        spikes = (s.get("itl_spikes") or {}).get("spikes") or []
        if spikes:
            shown = ", ".join(f"{_hms(x['start'])} ({x['peak_ms']:.0f} ms)" for x in spikes[:6])
            more = f" and {len(spikes) - 6} more" if len(spikes) > 6 else ""
            lines.append(
                f"{s['label']}: inter-token spikes at {shown}{more} (UTC; --trace FILE keeps "
                "every chunk for tpfabric diagnose)"
            )
    if compared is not None:
        faster = compared["faster"]
        ttft, decode = compared["ratio"]["ttft_ms"], compared["ratio"]["decode_tokens_per_s"]
        if faster["ttft_p50"]:
            lines.append(
                f"lower median time to first token: {faster['ttft_p50']} "
                f"({summaries[1]['label']} / {summaries[0]['label']} = {ttft['p50']:.2f}x)"
            )
        if faster["decode_tokens_per_s_p50"]:
            lines.append(
                f"higher median decode rate: {faster['decode_tokens_per_s_p50']} "
                f"({summaries[1]['label']} / {summaries[0]['label']} = {decode['p50']:.2f}x)"
            )
    return lines


# -- the command line -----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Return the options; exits (code 2) on a bad one."""
    parser = argparse.ArgumentParser(
        prog="tpfabric bench serve",
        description=(
            "Stream chat completions from an OpenAI-compatible endpoint (vLLM, SGLang, a hosted "
            "API) and report time to first token, inter-token latency and tokens/s, p50/p95/p99; "
            "--compare measures a second endpoint with the same load and gives the ratio."
        ),
    )
    parser.add_argument("--endpoint", required=True, help="base URL, e.g. http://host:8000/v1")
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument(
        "--label", default="endpoint", help="its name in the table (default: %(default)s)"
    )
    parser.add_argument("--compare", metavar="URL2", help="a second endpoint's base URL")
    parser.add_argument("--compare-model", help="its model (default: --model)")
    parser.add_argument(
        "--compare-label", default="compare", help="its name in the table (default: %(default)s)"
    )
    parser.add_argument(
        "--requests", type=int, default=Load.requests, help="requests in all (default: %(default)s)"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=Load.concurrency,
        help="requests in flight (default: %(default)s)",
    )
    parser.add_argument(
        "--max-tokens", type=int, default=Load.max_tokens, help="per request (default: %(default)s)"
    )
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="the user message (one for all)")
    parser.add_argument(
        "--ignore-eos",
        action="store_true",
        help="ask for --max-tokens every time (vLLM and SGLang; hosted APIs refuse it)",
    )
    parser.add_argument(
        "--api-key",
        help="default: $OPENAI_API_KEY, else EMPTY (what vLLM takes without --api-key)",
    )
    parser.add_argument("--compare-api-key", help="the second endpoint's (default: --api-key)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=Load.timeout,
        help="seconds without an answer (to connect, or between chunks) that fail a request "
        "(default: %(default)s)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    parser.add_argument(
        "--trace",
        type=Path,
        metavar="FILE",
        help="write every chunk's arrival time (Unix seconds) and each response's HTTP Date, "
        "for tpfabric diagnose --serve-trace",
    )
    args = parser.parse_args(argv)
    if min(args.requests, args.concurrency, args.max_tokens) < 1 or args.timeout <= 0:
        parser.error("--requests, --concurrency and --max-tokens >= 1, --timeout > 0")
    if (args.compare_model or args.compare_api_key) and not args.compare:
        parser.error("--compare-model and --compare-api-key need --compare URL2")
    for flag, path in (("--json", args.json), ("--trace", args.trace)):
        if path is not None and not path.parent.is_dir():
            parser.error(f"{flag} {path}: no folder {path.parent}")
    return args


def targets_of(args: argparse.Namespace) -> list[Target]:
    """Return the endpoints the options name: --endpoint, then --compare when given."""
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    found = [Target(args.label, args.endpoint, args.model, api_key)]
    if args.compare:
        found.append(
            Target(
                args.compare_label,
                args.compare,
                args.compare_model or args.model,
                args.compare_api_key or api_key,
                url_flag="--compare",
                model_flag="--compare-model",
                key_flag="--compare-api-key",
            )
        )
    return found


def main(argv: list[str] | None = None) -> int:
    """Run the client with command-line ``argv``; return the exit code (2: the openai client is
    missing or an endpoint cannot be measured, one line on stderr says what to fix; 1: an
    endpoint answered no request of the run)."""
    args = parse_args(argv)
    try:
        from importlib.metadata import version  # noqa: PLC0415

        import openai  # noqa: F401, PLC0415
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    load = Load(
        args.requests, args.concurrency, args.max_tokens, args.prompt, args.timeout, args.ignore_eos
    )
    targets = targets_of(args)
    console = Console(highlight=False, width=160)
    started = environment() | {"openai": version("openai")}
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        refresh_per_second=2,  # its thread shares the interpreter with the streams it times
    )
    kept: dict[str, list[RequestResult]] = {}
    try:
        with progress:
            summaries = asyncio.run(measure(targets, load, progress, kept=kept))
    except SetupError as err:
        print(f"tpfabric bench serve: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tpfabric bench serve: interrupted, nothing reported", file=sys.stderr)
        return 130
    compared = comparison(*summaries) if len(summaries) == 2 else None
    console.print(results_table(summaries, load, compared))
    for line in notes(summaries, compared):
        console.print(line)
    if args.json is not None:
        output = {
            "benchmark": "serve",
            "environment": started,
            "params": {
                "requests": load.requests,
                "concurrency": load.concurrency,
                "max_tokens": load.max_tokens,
                "prompt": load.prompt,
                "ignore_eos": load.ignore_eos,
                "timeout_s": load.timeout,
            },
            "endpoints": summaries,
            "comparison": compared,
        }
        args.json.write_text(json.dumps(output, indent=2) + "\n", encoding="utf-8")
    if args.trace is not None:
        document = trace_of(targets, kept)
        args.trace.write_text(json.dumps(document, separators=(",", ":")) + "\n", encoding="utf-8")
    return 1 if any(s["ok"] == 0 for s in summaries) else 0


def trace_of(targets: Sequence[Target], kept: dict[str, list[RequestResult]]) -> dict[str, Any]:
    """Return the trace document of the measured ``targets``."""
    return trace_document(
        socket.gethostname(),
        [
            {
                "label": target.label,
                "endpoint": target.url,
                "model": target.model,
                "requests": [
                    TracedRequest(r.sent_at or 0.0, r.answered_at, r.date, r.chunk_times, r.error)
                    for r in kept.get(target.label, [])
                    if r.sent_at is not None
                ],
            }
            for target in targets
        ],
    )


if __name__ == "__main__":
    raise SystemExit(main())
