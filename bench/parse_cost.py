"""CPU cost of reading streamed chunks: the SDK's chunk objects vs plain dicts.

Both paths read the same in-memory SSE body through the HTTP library the SDK
runs on, one event per read (the costliest cut: at model speed a read rarely
holds more), then fold every chunk with ``StreamAssembler.feed``:

- **sdk**: ``openai.AsyncStream`` (its SSE decoder, ``json``, a
  ``ChatCompletionChunk`` per chunk), what ``LLMClient`` used before;
- **dict**: :class:`botgateway.model.sse.ChunkStream` (bytes SSE decoder, ``orjson``).

The current assembler takes dicts only. To fold the SDK's objects too, pass
the assembler from before (``git show <commit>:botgateway/model/assembly.py >
/tmp/old_assembly.py``) with ``--old-assembly``; without it the sdk line
counts the parsing alone.

    .venv/bin/python -m bench.parse_cost [--chunks 20000] [--repeat 5] [--old-assembly FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from types import ModuleType
from typing import Any

import openai
from openai.types.chat import ChatCompletionChunk

from botgateway.model import ChunkStream, StreamAssembler

URL = "http://model.test/v1/chat/completions"
CHUNK = {
    "id": "chatcmpl-AY3kq9Zp1xV2mN8bR4tL6wQ0sE7uI",
    "object": "chat.completion.chunk",
    "created": 1732800000,
    "model": "gpt-4o-mini-2024-07-18",
    "system_fingerprint": "fp_0ba0d124f1",
    "choices": [{"index": 0, "delta": {"content": " the"}, "logprobs": None, "finish_reason": None}],
}
"""A realistic content delta: four characters in the usual envelope."""


def http_library() -> Any:
    """The HTTP library the installed SDK runs on (httpx2 or httpx)."""
    return sys.modules[openai.DefaultAsyncHttpxClient.__mro__[1].__module__.partition(".")[0]]


def body(count: int) -> list[bytes]:
    """``count`` chunk events and ``[DONE]``, one per read."""
    event = f"data: {json.dumps(CHUNK)}\n\n".encode()
    return [event] * count + [b"data: [DONE]\n\n"]


def response(events: list[bytes]) -> Any:
    """A streaming HTTP response whose body yields ``events``."""
    http = http_library()

    async def content() -> AsyncIterator[bytes]:
        for event in events:
            yield event

    return http.Response(
        200, headers={"content-type": "text/event-stream"}, content=content(), request=http.Request("POST", URL)
    )


async def sdk_path(events: list[bytes], assembler: Any) -> int:
    """Chunks read through the SDK's stream, folded by ``assembler`` unless ``None``."""
    client = openai.AsyncOpenAI(api_key="bench", base_url=URL, max_retries=0)
    stream = openai.AsyncStream(cast_to=ChatCompletionChunk, response=response(events), client=client)
    count = 0
    async for chunk in stream:
        if assembler is not None:
            assembler.feed(chunk)
        count += 1
    await client.close()
    return count


async def dict_path(events: list[bytes], assembler: Any) -> int:
    """Chunks read as dicts, folded by ``assembler``."""
    http_response = response(events)
    count = 0
    async for chunk in ChunkStream(http_response):
        assembler.feed(chunk)
        count += 1
    return count


def cpu_per_1000(run: Callable[[], Coroutine[Any, Any, int]], repeat: int) -> float:
    """The least CPU seconds per 1,000 chunks over ``repeat`` runs."""
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        count = asyncio.run(run())
        best = min(best, (time.process_time() - started) / count * 1000)
    return best


def load(path: str) -> ModuleType:
    """The module in the file ``path`` (an older ``assembly.py``)."""
    spec = importlib.util.spec_from_file_location("old_assembly", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    """Print CPU seconds per 1,000 chunks, and the chunks per CPU second, for each path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000, help="chunks per run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per path; the fastest counts")
    parser.add_argument("--old-assembly", help="an assembly.py that folds the SDK's objects")
    args = parser.parse_args(argv)
    events = body(args.chunks)
    old = load(args.old_assembly) if args.old_assembly else None
    paths: dict[str, Callable[[], Coroutine[Any, Any, int]]] = {
        "sdk objects" + (" + old feed" if old else " (parse only)"): lambda: sdk_path(
            events, old.StreamAssembler() if old else None
        ),
        "dicts (orjson) + feed": lambda: dict_path(events, StreamAssembler()),
    }
    for name, run in paths.items():
        cost = cpu_per_1000(run, args.repeat)
        print(f"{name:32} {cost:.4f} CPU s / 1,000 chunks   {1000 / cost:>9,.0f} chunks / CPU s")


if __name__ == "__main__":
    main()
