"""A stand-in OpenAI-compatible server on loopback: it streams ``chat.completion.chunk`` events
after a configured delay, as vLLM does, refuses what a real server refuses, and can stall between
tokens when told to (``stall``: seconds to wait before the next token, by the wall-clock time),
as a serving group does when one of its links drops packets. Used by the ``bench serve`` tests
and by the "find a straggler" walkthrough on the local control plane.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

KEY = "sk-stand-in"


@dataclass
class StandIn:
    """What the stand-in does: seconds before the first token and between tokens, tokens per
    answer (fewer when max_tokens asks), the models it serves, its API key, whether it honours
    ``stream_options.include_usage`` or refuses it (400, as an older server may), the status of
    an unknown model (vLLM 404, others 400), every ``fail_every``-th chat request a 500, and
    ``stall``: extra seconds before a token, given the Unix time it is due."""

    first_delay: float = 0.05
    token_delay: float = 0.005
    tokens: int = 6
    models: tuple[str, ...] = ("tiny-chat",)
    key: str = KEY
    usage: bool = True
    refuse_stream_options: bool = False
    unknown_model_status: int = 404
    fail_every: int = 0
    stall: Callable[[float], float] | None = None
    chat_requests: int = 0
    tokens_sent: list[int] = field(default_factory=list)
    url: str = ""


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {
        "id": "chatcmpl-stand-in",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [choice],
    }


def _error(status: int, message: str, code: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return web.json_response(body, status=status)


def stand_in_app(config: StandIn) -> web.Application:
    """Return the aiohttp app: POST /v1/chat/completions (SSE) and GET /v1/models."""

    def refused(request: web.Request) -> web.Response | None:
        if request.headers.get("Authorization") != f"Bearer {config.key}":
            return _error(401, "Incorrect API key provided.", "invalid_api_key")
        return None

    async def models(request: web.Request) -> web.Response:
        if (answer := refused(request)) is not None:
            return answer
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "me"} for m in config.models]
        return web.json_response({"object": "list", "data": data})

    async def chat(request: web.Request) -> web.StreamResponse:
        if (answer := refused(request)) is not None:
            return answer
        body = await request.json()
        model = body["model"]
        if model not in config.models:
            words = f"The model `{model}` does not exist."
            return _error(config.unknown_model_status, words, "model_not_found")
        if config.refuse_stream_options and "stream_options" in body:
            return _error(400, "Unknown field: stream_options", "invalid_request")
        config.chat_requests += 1
        if config.fail_every and config.chat_requests % config.fail_every == 0:
            return _error(500, "stand-in failure", "internal")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(data: dict[str, Any]) -> None:
            await response.write(f"data: {json.dumps(data)}\n\n".encode())

        # vLLM's first chunk names the role and carries no text: not a token
        await send(_chunk(model, {"role": "assistant", "content": ""}))
        count = min(config.tokens, body.get("max_tokens") or config.tokens)
        await asyncio.sleep(config.first_delay)
        for n in range(count):
            if n:
                await asyncio.sleep(config.token_delay)
            if config.stall is not None and (extra := config.stall(time.time())) > 0:
                await asyncio.sleep(extra)
            await send(_chunk(model, {"content": f"word{n} "}))
        await send(_chunk(model, {}, "length"))
        if config.usage and (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 9, "completion_tokens": count, "total_tokens": 9 + count}
            await send(_chunk(model, {}) | {"choices": [], "usage": usage})
        config.tokens_sent.append(count)
        await response.write(b"data: [DONE]\n\n")
        return response

    application = web.Application()
    application.router.add_post("/v1/chat/completions", chat)
    application.router.add_get("/v1/models", models)
    return application


@contextmanager
def serving(**settings: Any) -> Iterator[StandIn]:
    """Run a stand-in on 127.0.0.1 (a free port) in a thread with its own event loop."""
    config = StandIn(**settings)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner = web.AppRunner(stand_in_app(config))

    async def start() -> int:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return int(runner.addresses[0][1])

    port = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=5)
    config.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield config
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()
