"""The ``botgateway`` command line.

Each sub-command loads the configuration, reports every config problem in
plain words (never a traceback) and hands over to the module that implements
it. Modules are imported lazily so ``check-config`` stays fast and a broken
optional extra cannot break unrelated commands.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from botgateway.config import (
    MAX_WORKERS,
    Config,
    ConfigError,
    load_config,
    staleness_warnings,
    worker_problems,
    worker_warnings,
)

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-c",
        "--config",
        default=None,
        help="configuration file (default: ./config.yaml, or built-in defaults when absent)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(
        prog="botgateway",
        description="An LLM ops assistant for DingTalk and Slack, streamed into one card per question.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    _run_parser(sub)
    chat = sub.add_parser("chat", help="interactive chat in this terminal")
    _config_arg(chat)
    _ask_parser(sub)
    check = sub.add_parser("check-config", help="validate the configuration and print every problem")
    _config_arg(check)
    _tools_parser(sub)
    from botgateway.cli.eval_cmd import add_eval_parser

    _config_arg(add_eval_parser(sub))
    _audit_parser(sub)
    _usage_parser(sub)
    _feedback_parser(sub)
    _access_parser(sub)
    _schedules_parser(sub)
    from botgateway.cli.web import add_web_parser

    add_web_parser(sub)
    from botgateway.cli.mcp_door import add_mcp_parser

    _config_arg(add_mcp_parser(sub))
    return parser


def _run_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="start every adapter config.yaml enables")
    _config_arg(run)
    run.add_argument("--workers", type=_worker_count, default=None, metavar="N",
                     help=f"run N worker processes sharing the store (1-{MAX_WORKERS}; default: gateway.workers)")
    # Set by the supervisor of --workers for each worker process; not for people.
    run.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)


def _ask_parser(sub: Any) -> None:
    ask = sub.add_parser("ask", help="ask one question and print the answer")
    ask.add_argument("question", help="the question, in quotes")
    ask.add_argument("--json", action="store_true", help="print one JSON object per event, then the result")
    ask.add_argument("--conversation", default="cli", help="conversation id, to ask follow-ups (default: cli)")
    ask.add_argument("--new", action="store_true", help="forget the conversation's history first, then ask")
    ask.add_argument("--as", dest="as_principal", default="", metavar="PRINCIPAL",
                     help="ask as this principal (slack:U0123), through the access policy")
    ask.add_argument("--channel", default="", help="with --as: the channel it asks in (slack:C0OPS; default: a direct chat)")
    _config_arg(ask)


def _tools_parser(sub: Any) -> None:
    tools = sub.add_parser("tools", help="list or call tools without a model")
    tools_sub = tools.add_subparsers(dest="tools_command", metavar="ACTION")
    tools_sub.required = True
    tools_list = tools_sub.add_parser("list", help="list the tools the model is offered")
    _config_arg(tools_list)
    tools_call = tools_sub.add_parser("call", help="call one tool")
    tools_call.add_argument("name", help="tool name, as in 'tools list'")
    tools_call.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an argument (repeatable); VALUE is parsed as JSON when it is valid JSON",
    )
    _config_arg(tools_call)


def _schedules_parser(sub: Any) -> None:
    from botgateway.cli.schedules import FORMATS, parse_after

    schedules = sub.add_parser("schedules", help="list the scheduled reports, or run one now")
    schedules_sub = schedules.add_subparsers(dest="schedules_command", metavar="ACTION")
    schedules_sub.required = True
    schedules_list = schedules_sub.add_parser("list", help="each schedule's next run and destinations")
    schedules_list.add_argument("--format", choices=FORMATS, default="table", help="table (default) or json")
    schedules_list.add_argument("--after", type=parse_after, default=None, metavar="WHEN",
                                help="the next runs after this ISO date or time (UTC unless it says; default: now)")
    _config_arg(schedules_list)
    schedules_run = schedules_sub.add_parser("run", help="run one report now and wait for its cards")
    schedules_run.add_argument("name", help="the schedule's name, as in 'schedules list'")
    _config_arg(schedules_run)


def _access_parser(sub: Any) -> None:
    access = sub.add_parser("access", help="what the access policy grants someone")
    access_sub = access.add_subparsers(dest="access_command", metavar="ACTION")
    access_sub.required = True
    explain = access_sub.add_parser("explain", help="roles, tools, resources, approvals and limits of a principal")
    explain.add_argument("principal", help="a qualified id: slack:U0123 (slack:U0123@T0TEAM for its team), dingtalk:<staffId>")
    explain.add_argument("--channel", default="", help="where it asks: slack:C0OPS, dingtalk:cid… (default: a direct chat)")
    explain.add_argument("--external", action="store_true", help="as a user of another organisation (Slack Connect)")
    _config_arg(explain)


def _audit_parser(sub: Any) -> None:
    from botgateway.cli.audit import FORMATS, parse_count, parse_since

    audit = sub.add_parser("audit", help="list tool calls, refusals and limit hits from the audit records")
    audit.add_argument("--since", type=parse_since, default=None, metavar="WHEN",
                       help="from this age (30m, 1h, 2d, 1w) or ISO date/time (2026-11-30, UTC) on")
    audit.add_argument("--user", default="", help="only this asker: slack:U0123, or the platform's user id")
    audit.add_argument("--tool", default="", help="only this tool (a glob: k8s__*)")
    audit.add_argument("--format", choices=FORMATS, default="table", help="table (default), jsonl or csv")
    audit.add_argument("--limit", type=parse_count, default=1000, help="read the newest this many records (default: 1000)")
    _config_arg(audit)


def _feedback_parser(sub: Any) -> None:
    from botgateway.cli.audit import parse_count, parse_since
    from botgateway.cli.feedback import FORMATS

    feedback = sub.add_parser("feedback", help="the 👍/👎 given to answers, with reasons, models, tools and sources")
    feedback.add_argument("--since", type=parse_since, default=None, metavar="WHEN",
                          help="from this age (30m, 1h, 2d, 1w) or ISO date/time (2026-11-30, UTC) on")
    feedback.add_argument("--vote", choices=("up", "down"), default="", help="only 👍 (up) or only 👎 (down)")
    feedback.add_argument("--format", choices=FORMATS, default="table", help="table (default), jsonl or csv")
    feedback.add_argument("--limit", type=parse_count, default=1000,
                          help="read the newest this many votes (default: 1000)")
    _config_arg(feedback)


def _usage_parser(sub: Any) -> None:
    from botgateway.cli.audit import parse_count, parse_since
    from botgateway.cli.usage import FORMATS, GROUPS

    usage = sub.add_parser("usage", help="the models' tokens and their cost, by user, channel, model or day")
    usage.add_argument("--by", choices=GROUPS, default="model", help="group the model calls by this (default: model)")
    usage.add_argument("--since", type=parse_since, default=None, metavar="WHEN",
                       help="from this age (30m, 1h, 7d, 1w) or ISO date/time (2026-11-30, UTC) on")
    usage.add_argument("--format", choices=FORMATS, default="table", help="table (default), jsonl or csv")
    usage.add_argument("--limit", type=parse_count, default=100_000,
                       help="read the newest this many model calls (default: 100000)")
    _config_arg(usage)


def _worker_count(text: str) -> int:
    """``--workers``: a whole number from 1 to :data:`MAX_WORKERS`."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= count <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"{count} is not between 1 and {MAX_WORKERS}")
    return count


def _load(path: str | None) -> Config:
    return load_config(Path(path) if path else None)


def _check_config(config: Config, source: str) -> int:
    """Beyond the schema: whether it can run as ``gateway.workers`` processes, and the tools' own checks
    (inventory file, cloud SDKs, MCP commands)."""
    from botgateway.logs import configure_logging, secret_values
    from botgateway.redaction import redact_text
    from tools.catalog import check_toolset, toolset_warnings

    # Only the verdict goes to the terminal; the tools' progress logs would bury it.
    configure_logging(config.log.model_copy(update={"level": "error", "file": None}), secrets=secret_values(config))
    readiness: list[str] = []
    try:
        problems = asyncio.run(check_toolset(config.tools))
        readiness = asyncio.run(toolset_warnings(config.tools)) if not problems else []
    except Exception as exc:  # a broken extra must not turn check-config into a traceback
        detail = redact_text(str(exc), secret_values(config))
        problems = [f"tools: could not be checked ({type(exc).__name__}: {detail})"]
    problems = [*worker_problems(config, config.gateway.workers), *problems]
    if problems:
        _print_config_problems(ConfigError(problems, source))
        return EXIT_FAILED
    from botgateway.access import access_warnings

    warnings = [
        *access_warnings(config), *worker_warnings(config, config.gateway.workers), *staleness_warnings(config),
        *(redact_text(line, secret_values(config)) for line in readiness),
    ]
    for warning in warnings:
        print(f"{source}: warning: {warning}", file=sys.stderr)
    print("OK")
    return EXIT_OK


def _print_config_problems(error: ConfigError) -> None:
    if len(error.problems) == 1:
        # One problem reads best as one line, the way compilers report: "file: where: what".
        print(f"{error.source}: {error.problems[0]}", file=sys.stderr)
        return
    print(f"{error.source}: {len(error.problems)} problem(s):", file=sys.stderr)
    for problem in error.problems:
        print(f"  - {problem}", file=sys.stderr)


async def _dispatch(args: argparse.Namespace, config: Config) -> int:
    """Run the sub-command ``args.command`` (one of :data:`_COMMANDS`)."""
    command = _COMMANDS.get(args.command)
    if command is None:
        raise AssertionError(f"unhandled command {args.command}")
    return await command(args, config)


async def _ask(args: argparse.Namespace, config: Config) -> int:
    from botgateway.cli.ask import run_ask

    return await run_ask(config, args.question, json_mode=args.json, conversation_id=args.conversation, new=args.new,
                         as_principal=args.as_principal, channel=args.channel)


async def _run(args: argparse.Namespace, config: Config) -> int:
    workers = args.workers or config.gateway.workers
    if args.worker_index is None and workers > 1:
        from botgateway.cli.supervisor import supervise

        key = "--workers" if args.workers else "gateway.workers"
        return await supervise(config, config_path=args.config, workers=workers, key=key)
    from botgateway.cli.run import run

    if workers != config.gateway.workers:  # --workers: this process's share of the fleet's budgets counts it
        config = config.model_copy(update={"gateway": config.gateway.model_copy(update={"workers": workers})})
    return await run(config, worker_index=args.worker_index)


async def _chat(args: argparse.Namespace, config: Config) -> int:
    from botgateway.cli.run import chat

    return await chat(config)


async def _eval(args: argparse.Namespace, config: Config) -> int:
    from botgateway.cli.eval_cmd import run_eval

    return await run_eval(config, cases=Path(args.cases), model=args.model, tags=args.tag, json_file=args.json_file,
                          min_pass=args.min_pass, concurrency=args.concurrency)


async def _audit(args: argparse.Namespace, config: Config) -> int:
    from botgateway.cli.audit import run_audit

    return await run_audit(config, since=args.since, user=args.user, tool=args.tool, fmt=args.format, limit=args.limit)


async def _feedback(args: argparse.Namespace, config: Config) -> int:
    from botgateway.cli.feedback import run_feedback

    return await run_feedback(config, since=args.since, vote=args.vote, fmt=args.format, limit=args.limit)


async def _usage(args: argparse.Namespace, config: Config) -> int:
    from botgateway.cli.usage import run_usage

    return await run_usage(config, by=args.by, since=args.since, fmt=args.format, limit=args.limit)


async def _access(args: argparse.Namespace, config: Config) -> int:
    from botgateway.cli.access import explain

    return await explain(config, args.principal, channel=args.channel, external=args.external)


async def _schedules(args: argparse.Namespace, config: Config) -> int:
    from botgateway.cli import schedules as schedules_cli

    if args.schedules_command == "run":
        return await schedules_cli.schedules_run(config, args.name)
    return schedules_cli.schedules_list(config, fmt=args.format, after=args.after)


async def _mcp(args: argparse.Namespace, config: Config) -> int:
    from botgateway.cli.mcp_door import mcp_command

    return await mcp_command(config, args)


async def _tools(args: argparse.Namespace, config: Config) -> int:
    from botgateway.cli import tools as tools_cli

    if args.tools_command == "list":
        return await tools_cli.tools_list(config)
    return await tools_cli.tools_call(config, args.name, list(args.arg))


_COMMANDS: Mapping[str, Callable[[argparse.Namespace, Config], Awaitable[int]]] = MappingProxyType({
    "ask": _ask, "run": _run, "chat": _chat, "eval": _eval, "audit": _audit, "feedback": _feedback,
    "usage": _usage, "access": _access, "schedules": _schedules, "mcp": _mcp, "tools": _tools,
})
"""What runs each sub-command that needs the configuration and an event loop (``web`` and ``check-config`` need
neither: :func:`main` runs them itself)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``botgateway`` console script."""
    args = build_parser().parse_args(argv)
    if args.command == "web":  # needs no config: it only hashes a password
        from botgateway.cli.web import hash_password_command

        return hash_password_command(args)
    try:
        config = _load(args.config)
    except ConfigError as exc:
        _print_config_problems(exc)
        return EXIT_FAILED
    if args.command == "check-config":
        return _check_config(config, args.config or "config.yaml")

    from botgateway.logs import configure_logging, secret_values

    try:
        configure_logging(_log_config_for(args.command, config), secrets=secret_values(config))
        if args.command == "run":
            from botgateway.cli.event_loop import run

            return run(_dispatch(args, config), config.gateway.event_loop)
        return asyncio.run(_dispatch(args, config))
    except ConfigError as exc:
        _print_config_problems(exc)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`botgateway ask … | head`); stop quietly like other CLI tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as exc:
        # Last line of defence against a bug of ours: one plain line for the operator; the
        # traceback only at debug level, since for ask/tools the log is this same stderr.
        import structlog  # here, not at the top: a config that fails to load is reported before logging costs an import

        log = structlog.get_logger(__name__)
        log.error("command_crashed", command=args.command, error=type(exc).__name__)
        log.debug("command_crashed.traceback", exc_info=True)
        detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        print(f"botgateway {args.command}: {detail} (log.level: debug logs the traceback)", file=sys.stderr)
        return EXIT_FAILED


def _log_config_for(command: str, config: Config) -> Any:
    """Interactive commands keep the terminal for the card: logs go to a file unless one is set."""
    if config.log.file:
        return config.log
    terminal_chat = command == "chat" or (command == "run" and config.adapters.terminal.enabled and sys.stdin.isatty())
    if terminal_chat:
        return config.log.model_copy(update={"file": "data/botgateway.log"})
    # mcp: an IDE shows a stdio server's stderr; routine info lines would only bury its warnings.
    one_shot = ("ask", "eval", "tools", "audit", "usage", "feedback", "access", "schedules", "mcp")
    if command in one_shot and config.log.level == "info":
        # One-shot commands print their own outcome; routine info lines would only bury it.
        return config.log.model_copy(update={"level": "warning"})
    return config.log
