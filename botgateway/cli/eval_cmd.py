"""``botgateway eval``: the answer-quality suite run through the real loop, with a model and an estate per case.

Each case's question is asked the way ``botgateway ask`` asks one (the same
:func:`~botgateway.cli.runtime.build_runtime` and tool loop, as the local
user, approvals off) against the case's estate: the static inventory tools
read that file with every toolset offered, and no cloud, cluster or MCP server
of the config is called, so an answer depends only on the model. Cases sharing
an estate share one runtime and run ``--concurrency`` at a time (across the
estates), each in a conversation of its own.
History and audit go to a temporary store, never the config's.

``--model`` picks the model: ``demo`` (the offline demo model), a provider
preset (``deepseek``, ``qwen``, ``ollama`` …, with ``llm.api_key``),
``preset:model`` (``ollama:qwen2.5:14b``), an endpoint URL (``http://host:8000/v1``
with ``llm.model``) or a model name at the configured endpoint. Fallbacks and
routes are dropped: the eval measures one model.

Exit status: 0 when the pass rate is at least ``--min-pass`` (default 0: the
report is the point; CI gates with ``--min-pass``), 1 below it, 2 for unusable
case files, estates or options.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from botgateway.cli.eval_cases import Case, CaseFileError, EstateRef, load_cases, score
from botgateway.cli.eval_report import CaseRun, print_report, report_json, summarize
from botgateway.config import Config, ConfigError
from botgateway.config.llm import PROVIDER_PRESETS, LLMConfig
from botgateway.events import ToolCallStarted, TurnDone, TurnFailed, UsageReported
from botgateway.tooling import ToolContext, local_user

__all__ = ["EXIT_BAD_INPUT", "EXIT_BELOW", "EXIT_OK", "add_eval_parser", "eval_config", "model_settings", "run_eval"]

EXIT_OK = 0
"""The pass rate reached ``--min-pass``."""
EXIT_BELOW = 1
"""The pass rate fell short of ``--min-pass``."""
EXIT_BAD_INPUT = 2
"""A case file, estate or option could not be used; nothing was scored."""

DEFAULT_CASES = "evals/cases"
"""Where the suite's case files live, from the project's root."""


def add_eval_parser(sub: Any) -> argparse.ArgumentParser:
    """Declare ``botgateway eval`` and its options on the sub-command parsers ``sub``; returns its parser."""
    parser = sub.add_parser("eval", help="score a model's answers on the eval cases (facts, tools, tokens, latency)")
    parser.add_argument("--model", default="", metavar="NAME_OR_URL",
                        help="demo, a preset (deepseek, qwen, ollama…), preset:model, an endpoint URL or a model name "
                             "(default: the configured llm)")
    parser.add_argument("--cases", default=DEFAULT_CASES, metavar="PATH",
                        help=f"a case file or a folder of them (default: {DEFAULT_CASES})")
    parser.add_argument("--tag", action="append", default=[], metavar="TAG",
                        help="only cases with this tag (repeatable: any of them)")
    parser.add_argument("--json", dest="json_file", default="", metavar="FILE",
                        help="also write the report with every answer to FILE as JSON")
    parser.add_argument("--min-pass", type=_fraction, default=0.0, metavar="RATE",
                        help="exit 1 when the pass rate is below RATE, 0-1 (default: 0)")
    parser.add_argument("--concurrency", type=_count, default=4, metavar="N",
                        help="cases asked at once (default: 4)")
    return parser


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 1 (0.9 is 90%)")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 64:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to 64")
    return int(text)


def model_settings(llm: LLMConfig, spec: str) -> LLMConfig:
    """``llm`` pointed at the model ``spec`` names (see the module docstring), without fallbacks or routes.

    Raises :class:`ValueError` in plain words when the result is unusable (a preset without a key, a URL
    without a model name).
    """
    fields: dict[str, Any] = {**llm.model_dump(), "api_key": llm.api_key, "fallbacks": [], "routes": []}
    spec = spec.strip()
    preset, _, named = spec.partition(":")
    if spec == "demo":
        fields.update(provider="demo", base_url=None, model="")
    elif spec.startswith(("http://", "https://")):
        fields.update(provider="custom", base_url=spec)
    elif preset in PROVIDER_PRESETS or preset == "custom":
        fields.update(provider=preset, base_url=None if preset != "custom" else llm.base_url, model=named)
    elif spec:
        fields.update(model=spec)
    try:
        return LLMConfig.model_validate(fields)
    except ValidationError as exc:
        detail = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise ValueError(f"--model {spec or '(configured)'}: {detail}") from None


def eval_config(config: Config, llm: LLMConfig, estate: Path, store: Path) -> Config:
    """``config`` as one estate's runtime uses it: ``llm``, the inventory tools on ``estate`` (every toolset, so
    runs compare across configs) and nothing else to call, history in ``store``, no HTTP server, metrics or alerts."""
    from botgateway.config import CloudProviderConfig, InventoryConfig, KubernetesConfig
    from botgateway.config.toolset import TOOLSETS

    tools = config.tools.model_copy(update={
        "inventory": InventoryConfig(enabled=True, path=str(estate)),
        "aliyun": CloudProviderConfig(), "tencent": CloudProviderConfig(), "aws": CloudProviderConfig(),
        "kubernetes": KubernetesConfig(), "mcp": [], "toolsets": list(TOOLSETS),
    })
    return config.model_copy(update={
        "llm": llm, "tools": tools,
        "memory": config.memory.model_copy(update={"store": "sqlite", "sqlite_path": str(store)}),
        "http": config.http.model_copy(update={"enabled": False}),
        "metrics": config.metrics.model_copy(update={"enabled": False}),
        "alerts": config.alerts.model_copy(update={"enabled": False}),
    })


async def run_eval(
    config: Config, *, cases: Path, model: str = "", tags: Sequence[str] = (), json_file: str = "",
    min_pass: float = 0.0, concurrency: int = 4, out: TextIO | None = None, err: TextIO | None = None,
) -> int:
    """Run the cases under ``cases`` (those with any of ``tags``), print the report; returns the exit status."""
    from tools.providers.inventory import resolve_path

    out, err = out or sys.stdout, err or sys.stderr
    try:
        llm = model_settings(config.llm, model)
        chosen = [c for c in load_cases(cases, resolve_path("tools/sample_inventory.yaml"))
                  if not tags or set(tags) & set(c.tags)]
    except (ValueError, CaseFileError) as exc:
        for problem in getattr(exc, "problems", [str(exc)]):
            print(f"botgateway eval: {problem}", file=err)
        return EXIT_BAD_INPUT
    if not chosen:
        print(f"botgateway eval: no case in {cases} has the tag {' or '.join(tags)}", file=err)
        return EXIT_BAD_INPUT
    try:
        runs = await _run_cases(config, llm, chosen, concurrency, err)
    except _EstateUnusable as exc:
        _estate_failed(exc.group, exc.error, err)
        return EXIT_BAD_INPUT
    order = {case.id: i for i, case in enumerate(chosen)}
    runs.sort(key=lambda run: order[run.case.id])
    summary = summarize(runs)
    label = "demo model" if llm.resolved_provider == "demo" else llm.resolved_model
    print_report(summary, runs, label, out)
    if json_file:
        _write_json(Path(json_file), report_json(summary, runs, label))
    return EXIT_OK if summary.pass_rate >= min_pass else EXIT_BELOW


def _write_json(path: Path, report: dict[str, Any]) -> None:
    """The report as ``--json`` writes it (a small file, once, after every case ran)."""
    path.write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


class _EstateUnusable(Exception):
    """The tools cannot read a group's estate (raised before any of its cases is asked)."""

    def __init__(self, group: Sequence[Case], error: ConfigError) -> None:
        super().__init__(str(error))
        self.group = group
        self.error = error


def _estate_failed(group: Sequence[Case], exc: ConfigError, err: TextIO) -> None:
    """An estate the tools cannot read: name where it is declared, the cases on it, and each problem."""
    estate = group[0].estate
    ids = ", ".join(case.id for case in group[:5]) + (" …" if len(group) > 5 else "")
    print(f"botgateway eval: {estate.declared}: the estate {estate.label} cannot be used (cases {ids}):", file=err)
    for problem in exc.problems:
        print(f"  - {problem}", file=err)


async def _run_cases(
    config: Config, llm: LLMConfig, cases: Sequence[Case], concurrency: int, err: TextIO
) -> list[CaseRun]:
    """Every case, ``concurrency`` at a time across the estates: one runtime per estate, all up at once so the
    slowest estate's cases never wait for another's to finish."""
    from botgateway.cli.runtime import build_runtime

    groups: dict[str, list[Case]] = {}
    for case in cases:
        groups.setdefault(case.estate.key, []).append(case)
    gate = asyncio.Semaphore(concurrency)

    async def one(runtime: Any, case: Case) -> CaseRun:
        async with gate:
            run = await _ask(runtime, case)
        mark = "✓" if run.verdict.passed else "✗"
        print(f"{mark} {case.id} ({run.latency_s:.1f} s, {len(run.tool_calls)} tool calls)", file=err, flush=True)
        return run

    with tempfile.TemporaryDirectory(prefix="botgateway-eval-") as scratch:
        async with AsyncExitStack() as stack:
            asks = []
            for index, group in enumerate(groups.values()):
                folder = Path(scratch) / f"estate-{index}"
                folder.mkdir()
                settings = eval_config(config, llm, _estate_file(group[0].estate, folder), folder / "eval.db")
                try:
                    runtime = await stack.enter_async_context(build_runtime(settings))
                except ConfigError as exc:
                    raise _EstateUnusable(group, exc) from None
                asks += [one(runtime, case) for case in group]
            return list(await asyncio.gather(*asks))


def _estate_file(estate: EstateRef, folder: Path) -> Path:
    """The estate's file: its own, or the inline mapping written into ``folder``."""
    if estate.path is not None:
        return estate.path
    path = folder / "estate.yaml"
    path.write_text(estate.inline, encoding="utf-8")
    return path


async def _ask(runtime: Any, case: Case) -> CaseRun:
    """One case's question as ``botgateway ask`` asks it (the local user, approvals off), scored."""
    user = local_user()
    conversation = f"eval-{case.id}-{uuid.uuid4().hex[:8]}"
    ctx = ToolContext(user_id=user, user_name=user, platform="cli", conversation_id=conversation, chat_id=conversation)
    calls: list[str] = []
    prompt = completion = 0
    answer, error = "", ""
    started = time.monotonic()
    async for event in runtime.loop.run_turn(conversation, case.question, ctx, turn_id=uuid.uuid4().hex,
                                             approvals=False):
        if isinstance(event, ToolCallStarted):
            calls.append(event.name)
        elif isinstance(event, UsageReported):
            prompt, completion = prompt + event.prompt_tokens, completion + event.completion_tokens
        elif isinstance(event, TurnDone):
            answer = event.result.answer
        elif isinstance(event, TurnFailed):
            answer, error = event.partial_answer, f"{event.reason}: {event.message}"
    latency = time.monotonic() - started
    return CaseRun(case, answer, tuple(calls), prompt, completion, latency, score(case, answer, calls, error=error))
