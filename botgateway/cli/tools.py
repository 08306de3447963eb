"""``botgateway tools list`` and ``botgateway tools call``: try tools without a model.

Calls go through the same :class:`~botgateway.tooling.ToolRegistry` the model
uses (timeouts, size cap, argument validation), so what an operator sees here
is what the model would get.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from botgateway.cli.runtime import tool_registry
from botgateway.config import Config
from botgateway.tooling import ToolContext, local_user

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "ArgumentSyntaxError", "parse_args", "tools_call", "tools_list"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class ArgumentSyntaxError(ValueError):
    """A ``--arg`` that is not ``KEY=VALUE``."""


def parse_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``["ip=10.0.1.100", "limit=5"]`` → ``{"ip": "10.0.1.100", "limit": 5}``.

    A value that parses as JSON is taken as JSON (numbers, booleans, null,
    lists, objects); anything else is a plain string.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ArgumentSyntaxError(f"--arg expects KEY=VALUE, got {pair!r}")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[key] = value
    return out


async def _build(config: Config) -> Any:
    from tools.catalog import build_toolset

    return await build_toolset(config.tools)


def _signature(parameters: Mapping[str, Any]) -> str:
    props = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    return ", ".join(name if name in required else f"{name}?" for name in props) or "—"


def _report_problems(err: Console, toolset: Any) -> None:
    for problem in getattr(toolset, "problems", []) or []:
        err.print(Text(f"warning: {problem}", style="yellow"), soft_wrap=True)


def _print_toolsets(out: Console, statuses: Sequence[Any]) -> None:
    """The toolsets, whether each is ready, an example question, and every failed check with its fix."""
    if not statuses:
        return
    table = Table(title="Toolsets (tools.toolsets)", show_lines=False)
    table.add_column("toolset", style="bold", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("providers")
    table.add_column("try asking")
    for status in statuses:
        word = "off" if not status.enabled else ("ready" if status.ready else "needs setup")
        style = "dim" if not status.enabled else ("green" if status.ready else "yellow")
        table.add_row(Text(status.name), Text(word, style=style), Text(", ".join(status.providers) or "—"), Text(status.example))
    out.print(table)
    needed: dict[tuple[str, str], list[str]] = {}
    for status in statuses:
        for check in status.failed if status.enabled else ():
            needed.setdefault((check.what, check.fix), []).append(status.name)
    for (what, fix), names in needed.items():
        out.print(Text(f"  ✗ {what} ({', '.join(names)}): {fix}", style="yellow"), soft_wrap=True)


async def tools_list(config: Config, *, console: Console | None = None) -> int:
    """Print every tool the model is offered, and the ones that are not and why."""
    out = console or Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    toolset = await _build(config)
    try:
        table = Table(title="Tools offered to the model", show_lines=False)
        table.add_column("name", style="bold", no_wrap=True)
        table.add_column("arguments (? = optional)")
        table.add_column("description")
        for t in toolset.tools:
            first_line = (t.description or "").strip().splitlines()[0] if t.description else ""
            table.add_row(Text(t.name), Text(_signature(t.parameters)), Text(first_line))
        out.print(table)
        if not toolset.tools:
            out.print(Text("No tools are configured (see the tools: section of config.yaml)."))
        providers = getattr(toolset, "providers", [])
        out.print(Text(f"Server providers: {', '.join(providers) if providers else 'none'}"))
        _print_toolsets(out, await toolset.readiness(probe=True) if hasattr(toolset, "readiness") else [])
        unavailable = getattr(toolset, "unavailable", {}) or {}
        if unavailable:
            out.print(Text("Not offered:", style="dim"))
            for reason in unavailable.values():
                out.print(Text(f"  {reason}", style="dim"))
        _report_problems(err, toolset)
    finally:
        await toolset.aclose()
    return EXIT_OK


async def tools_call(config: Config, name: str, args: list[str], *, console: Console | None = None) -> int:
    """Call tool ``name`` with ``--arg KEY=VALUE`` pairs and print what it returns."""
    out = console or Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    try:
        arguments = parse_args(args)
    except ArgumentSyntaxError as exc:
        err.print(Text(f"error: {exc}", style="red"))
        return EXIT_USAGE
    toolset = await _build(config)
    try:
        _report_problems(err, toolset)
        registry = tool_registry(config, toolset.tools)
        toolset.attach(registry)
        if registry.get(name) is None:
            reason = (getattr(toolset, "unavailable", {}) or {}).get(name)
            invalid = toolset.check_unavailable_arguments(name, arguments) if reason else None
            if invalid:
                err.print(Text(f"error: {name}: {invalid}", style="red"), soft_wrap=True)
                err.print(Text(f"note: {reason}", style="yellow"), soft_wrap=True)
                return EXIT_FAILED
            if reason:
                err.print(Text(f"error: {reason}", style="red"), soft_wrap=True)
            else:
                known = ", ".join(registry.names) or "none"
                err.print(Text(f"error: unknown tool {name!r}; available tools: {known}", style="red"))
            return EXIT_USAGE
        user = local_user()
        ctx = ToolContext(user_id=user, user_name=user, platform="cli", conversation_id="cli")
        outcome = await registry.execute(name, arguments, ctx)
    finally:
        await toolset.aclose()
    if not outcome.ok:
        message = outcome.error or outcome.content
        err.print(Text(f"error: {name} failed: {message}", style="red"), soft_wrap=True)
        return EXIT_FAILED
    # Long lines stay whole (a terminal wraps them; a pipe or a file keeps each breakdown line on one line).
    out.print(Text(f"✓ {name}: {outcome.summary} ({outcome.duration_s:.2f} s)", style="green"), soft_wrap=True)
    artifacts = getattr(outcome, "artifacts", ())
    out.print(Text(_for_operator(outcome.content, artifacts)), soft_wrap=True)
    for artifact in artifacts:
        shape = f" {artifact.sparkline}" if artifact.sparkline else ""
        out.print(Text(f"chart: {artifact.title} ({artifact.width}×{artifact.height} PNG, drawn for the card){shape}",
                       style="dim"), soft_wrap=True)
    return EXIT_OK


def _for_operator(content: str, artifacts: Sequence[Any]) -> str:
    """The tool's text without the lines telling the model about a chart (the operator gets a ``chart:`` line)."""
    refs = [a.ref for a in artifacts if getattr(a, "ref", "")]
    return "\n".join(line for line in content.splitlines() if not any(ref in line for ref in refs))
