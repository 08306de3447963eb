"""Presenting a benchmark report: rich tables, floors, goals, a JSON file and a PNG chart (the core scenarios'
parts are in :mod:`bench.core_report`).

The report dict has gone through :func:`bench.stats.jsonable`: a percentile
that reached a failed answer is ``None`` with ``failed > 0`` in its summary,
and is shown as ``∞``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.charts import charts_lines, charts_tables
from bench.core_report import core_chart_row, core_problem_lines, core_table
from bench.crash import crash_lines
from bench.estate import estate_lines, estate_table
from bench.incident import incident_lines

COLORS = {"slack/auto": "#2b8a3e", "slack/edit": "#1c7ed6", "dingtalk/card": "#e8590c"}


def _s(value: float | None, summary: dict[str, Any] | None = None) -> str:
    if value is None:
        return "∞" if summary and summary.get("failed") else "—"
    return f"{value:.2f}"


def _pct(summary: dict[str, Any] | None, *keys: str) -> str:
    if not summary:
        return "—"
    return " / ".join(_s(summary.get(k), summary) for k in keys)


def _throttled(result: dict[str, Any]) -> int:
    return sum(c.get("throttled", 0) for c in result["calls"].values())


def _sort_key(value: float | None, failed: int) -> float:
    if value is None:
        return float("inf") if failed else 0.0
    return float(value)


def best_floor(result: dict[str, Any]) -> dict[str, Any]:
    """The scenario's floor (:func:`bench.floor.scenario_floor`); in a report of before it, the lowest p95 of the
    plans shown."""
    if "floor" in result:
        return dict(result["floor"])
    return min(result["floors"], key=lambda f: _sort_key(f["complete_s"]["p95"], f["complete_s"].get("failed", 0)))


def _ratios(result: dict[str, Any]) -> str:
    """Measured ÷ floor, p50 and p95 (``1.04× / 1.31×``)."""
    ratio = result.get("ratio") or {}
    return " / ".join("∞" if ratio.get(k) is None and result["complete_s"].get("failed") else
                      "—" if ratio.get(k) is None else f"{ratio[k]:.2f}×" for k in ("p50", "p95"))


def _distance(result: dict[str, Any]) -> str:
    """Measured complete p95 minus the best floor's p95."""
    measured, floor_p95 = result["complete_s"]["p95"], best_floor(result)["complete_s"]["p95"]
    if measured is None:
        return "∞" if result["complete_s"].get("failed") else "—"
    return "—" if floor_p95 is None else f"{measured - floor_p95:+.2f}"


def _latency_table(results: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    twice = any("answered_twice" in r for r in results)  # Slack's results count them
    for name, justify in [("scenario", "left"), ("exact", "right"), ("first text p50 / p95", "right"),
                          ("complete p50 / p95 / max", "right"), ("floor p50 / p95", "right"), ("÷ floor", "right"),
                          ("p95 − floor", "right"), ("throttled", "right"),
                          ("live left", "right"), *([("answered twice", "right")] if twice else []),
                          ("mention → model p50", "right"), ("CPU s / RSS MB", "right")]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in results:
        best = best_floor(r)
        table.add_row(
            r["scenario"]["name"],
            f"{r['exact']}/{r['answers']}",
            _pct(r["first_text_s"], "p50", "p95"),
            _pct(r["complete_s"], "p50", "p95", "max"),
            _pct(best["complete_s"], "p50", "p95"),
            _ratios(r),
            _distance(r),
            str(_throttled(r)),
            str(r["live_left"]["count"]),
            *([str(r["answered_twice"]["count"]) if "answered_twice" in r else "—"] if twice else []),
            _pct(r["model"]["inbound_to_model_request_s"], "p50"),
            f"{r['process']['cpu_s']:.1f} / {r['process']['peak_rss_bytes'] / 2**20:.0f}",
        )
    return table


def _calls_table(results: list[dict[str, Any]], title: str) -> Table:
    methods: list[str] = []
    for r in results:
        methods += [m for m in r["methods"] if m not in methods]
    table = Table(title=title, title_justify="left")
    table.add_column("scenario")
    for method in methods:
        table.add_column(method, justify="right")
    for r in results:
        cells = []
        for method in methods:
            c = r["calls"].get(method, {})
            throttled = c.get("throttled", 0)
            cells.append(f"{c.get('accepted', 0)} / {'[red]' if throttled else ''}{throttled}{'[/]' if throttled else ''}")
        table.add_row(r["scenario"]["name"], *cells)
    return table


def _floor_lines(result: dict[str, Any], gen_s: float) -> list[str]:
    """Each plan's floor, then the scenario's beside the figures: the ratios, and each answer against its own."""
    lines = []
    for f in result["floors"]:
        c = f["complete_s"]
        budget = f"calls ÷ rate {f['calls_over_rate_s']:.1f} s on {f['busiest_limit']}" if f["busiest_limit"] else "no limit binds"
        aside = "" if f.get("in_floor", True) else " (shown beside the floor, not part of it)"
        lines.append(
            f"  floor {f['plan']} ({f['calls']}): {budget}; best schedule complete p50/p95/max "
            f"{_s(c['p50'])}/{_s(c['p95'])}/{_s(c['max'])} s (gen {gen_s:g} s){aside}"
        )
    if "floor" not in result:
        return lines
    best, complete = result["floor"], result["complete_s"]
    over = result["over_floor_s"]
    lines.append(
        f"  [bold]FLOOR[/] {best['plan']}: p50/p95/max {_s(best['complete_s']['p50'])}/{_s(best['complete_s']['p95'])}/"
        f"{_s(best['complete_s']['max'])} s (generation {best['gen_s']:g} s, round trip {best['latency_s'] * 1000:g} ms) · "
        f"measured {_pct(complete, 'p50', 'p95')} s = {_ratios(result)} the floor · each answer past its own floor "
        f"p50/p95/max {_pct(over, 'p50', 'p95', 'max')} s"
    )
    return lines


def _shape_lines(result: dict[str, Any]) -> list[str]:
    """An incident's channel, a crash's kill and restart."""
    variant = result["scenario"].get("variant", "")
    if variant.startswith("incident"):
        return incident_lines(result)
    if variant == "crash" and "crash" in result:
        return crash_lines(result)
    return []


def _fleet_lines(result: dict[str, Any]) -> list[str]:
    """A fleet's replicas (the table sums their CPU and RSS), and on Slack what went wrong delivering to them."""
    replicas = result["process"].get("replicas")
    if not replicas:
        return []
    each = "; ".join(f"replica {p['index']} CPU {p['cpu_s']:.1f} s, RSS {p['peak_rss_bytes'] / 2**20:.0f} MB"
                     for p in replicas)
    how = ("Slack events over HTTP, every mention posted to each" if "deliveries" in result
           else "a Stream connection each, the messages handed to them in turn")
    lines = [f"  {len(replicas)} replicas sharing Redis, {how} (the table sums their CPU and RSS): {each}"]
    if "deliveries" not in result:
        return lines
    twice = result["answered_twice"]
    if twice["count"]:
        lines.append(f"  [yellow]{twice['count']} turns answered twice[/] (e.g. turns {twice['turns'][:5]}; "
                     f"at most {twice['model_requests_max']} model requests, {twice['answer_messages_max']} answer "
                     "messages for one turn)")
    deliveries = result["deliveries"]
    if deliveries["failed_count"]:
        lines.append(f"  [yellow]{deliveries['failed_count']} event posts not answered 200[/], e.g. "
                     f"{deliveries['failed'][0][:160]}")
    return lines


def _problem_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    if result["failures"]:
        shown = ", ".join(f"#{f['turn']}: {f['problem']}" for f in result["failures"][:3])
        lines.append(f"  [yellow]{len(result['failures'])} failed answers[/] (∞ in every percentile), e.g. {shown}")
    if result["live_left"]["count"]:
        lines.append(f"  [yellow]still live-looking:[/] {'; '.join(result['live_left']['examples'][:3])}")
    stream = result["model"].get("answer_stream_s")
    target = result["model"]["answer_stream_target_s"]
    if stream and stream.get("p50") is not None and stream["p50"] > target + max(0.25, 0.05 * target):
        lines.append(f"  [yellow]the model's streams took {stream['p50']:.2f} s (p50), not {target:g} s: the machine is too busy[/]")
    for warning in result.get("worker_warnings", [])[-2:]:
        lines.append(f"  [dim]worker: {warning[:160]}[/]")
    return lines


def print_report(report: dict[str, Any], console: Console | None = None, *, paths: Sequence[Path] = ()) -> None:
    """Latency and call tables per platform, floors, goals, machine load and the command to reproduce."""
    console = console or Console()
    settings = report["settings"]
    gen_s = settings["gen_s"]
    results = report["scenarios"]
    head = (f"answers {settings['answer_chars'][0]}–{settings['answer_chars'][1]} chars in {gen_s:g} s · "
            f"platform latency {settings['latency_ms']:g} ms · seconds from the mention")
    for platform in ("slack", "dingtalk"):
        mine = [r for r in results if r["scenario"]["platform"] == platform]
        if not mine:
            continue
        console.print(_latency_table(mine, f"{platform}: {head}"))
        console.print(_calls_table(mine, f"{platform}: calls per method, accepted / throttled"))
    core = [r for r in results if r["scenario"]["platform"] == "core"]
    if core:
        console.print(core_table(core, settings))
    estate = [r for r in results if r["scenario"]["platform"] == "estate"]
    if estate:
        console.print(estate_table(estate))
    for r in (r for r in results if r["scenario"]["platform"] == "charts"):
        for table in charts_tables(r):
            console.print(table)
    for r in results:
        console.print(f"[bold]{r['scenario']['name']}[/]")
        lines = (core_problem_lines(r) if r["scenario"]["platform"] == "core"
                 else estate_lines(r) if r["scenario"]["platform"] == "estate"
                 else charts_lines(r) if r["scenario"]["platform"] == "charts"
                 else _floor_lines(r, gen_s) + _shape_lines(r) + _fleet_lines(r) + _problem_lines(r))
        for line in lines:
            console.print(line, soft_wrap=True)
    _print_goals(report, console)
    machine = report["machine"]
    load = " ".join(f"{x:.2f}" for x in machine["loadavg"])
    after = " ".join(f"{x:.2f}" for x in machine.get("loadavg_after", []))
    console.print(f"machine: {machine['usable_cpus']} usable of {machine['cpu_count']} CPUs · load average {load} before, "
                  f"{after} after · Python {machine['python']} · {machine['platform']}")
    console.print(f"reproduce: {report['reproduce']['make']}", soft_wrap=True)
    for path in paths:
        console.print(f"wrote {path}")


def _print_goals(report: dict[str, Any], console: Console) -> None:
    total = passed = 0
    for r in report["scenarios"]:
        for goal in r["goals"]:
            total += 1
            passed += goal["passed"]
            mark = "[green]✓[/]" if goal["passed"] else "[red]✗[/]"
            console.print(f"{mark} {r['scenario']['name']}: {goal['goal']} — measured {goal['measured']}")
    for goal in report.get("goals", []):
        total += 1
        passed += goal["passed"]
        mark = "[green]✓[/]" if goal["passed"] else "[red]✗[/]"
        console.print(f"{mark} core: {goal['goal']} — measured {goal['measured']}", soft_wrap=True)
    for name, error in report["failures"].items():
        console.print(f"[red]✗ {name} did not run:[/] {error}", soft_wrap=True)
    verdict = "[green]all passed[/]" if report["passed"] else "[red]not all passed[/]"
    console.print(f"goals: {passed}/{total} passed, {len(report['failures'])} scenario(s) failed to run — {verdict}")


def write_json(report: dict[str, Any], path: Path) -> Path:
    """Write the full report as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return path


def _capped(summary: dict[str, Any], key: str, cap: float) -> float:
    value = summary.get(key)
    if value is None:
        return cap if summary.get("failed") else 0.0
    return min(float(value), cap)


def _latency_panel(ax: Any, results: list[dict[str, Any]], key: str, title: str, cap: float) -> None:
    names = [r["scenario"]["name"].split("/", 1)[1] for r in results]
    x = list(range(len(results)))
    colors = [COLORS.get(f"{r['scenario']['platform']}/{r['scenario']['mode']}", "#868e96") for r in results]
    p50 = [_capped(r[key], "p50", cap) for r in results]
    p95 = [_capped(r[key], "p95", cap) for r in results]
    ax.bar([i - 0.2 for i in x], p50, width=0.4, color=colors, label="p50")
    ax.bar([i + 0.2 for i in x], p95, width=0.4, color=colors, alpha=0.45, hatch="//", label="p95 (∞ drawn at the top)")
    if key == "complete_s":
        floors = [_capped(best_floor(r)["complete_s"], "p95", cap) for r in results]
        ax.scatter([i + 0.2 for i in x], floors, marker="_", s=300, color="black", label="floor p95 (best plan)", zorder=3)
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=7)
    ax.set_title(title)
    ax.set_ylabel("seconds from the mention")
    ax.legend(fontsize=7)


def _calls_panel(ax: Any, results: list[dict[str, Any]]) -> None:
    names = [r["scenario"]["name"].split("/", 1)[1] for r in results]
    accepted = [sum(c.get("accepted", 0) for m, c in r["calls"].items() if m in r["methods"]) for r in results]
    throttled = [sum(c.get("throttled", 0) for m, c in r["calls"].items() if m in r["methods"]) for r in results]
    x = list(range(len(results)))
    ax.bar(x, accepted, color="#2b8a3e", label="accepted")
    ax.bar(x, throttled, bottom=accepted, color="#c92a2a", label="throttled")
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=7)
    ax.set_title("card/message calls")
    ax.legend(fontsize=7)


def _timeline_panel(ax: Any, result: dict[str, Any]) -> None:
    for method, series in result["timeline"].items():
        line = ax.step(range(len(series["accepted"])), series["accepted"], where="post", label=f"{method}")
        if any(series["throttled"]):
            ax.step(range(len(series["throttled"])), series["throttled"], where="post", linestyle=":",
                    color=line[0].get_color(), label=f"{method} throttled")
    ax.set_title(f"calls per second: {result['scenario']['name']}")
    ax.set_xlabel("seconds since the first mention")
    ax.legend(fontsize=6)


def write_chart(report: dict[str, Any], path: Path) -> Path:
    """Per platform: first text and complete latencies (with the floor), calls, and the busiest scenario's calls over time;
    a row for the core scenarios."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    platforms = [p for p in ("slack", "dingtalk") if any(r["scenario"]["platform"] == p for r in report["scenarios"])]
    core = [r for r in report["scenarios"] if r["scenario"]["platform"] == "core"]
    rows = max(1, len(platforms) + bool(core))
    fig, axes = plt.subplots(rows, 4, figsize=(22, 5.5 * rows), squeeze=False)
    settings = report["settings"]
    if platforms:
        title = (f"botgateway end to end: answers of {settings['answer_chars'][0]}–{settings['answer_chars'][1]} chars "
                 f"generated in {settings['gen_s']:g} s, fake platforms with their rate limits")
    else:
        fleet = f" in {settings['workers']} worker processes" if settings.get("workers", 1) > 1 else ""
        title = (f"botgateway core: N turns at once through the Gateway{fleet}, the model offering "
                 f"{settings['core_chunks_per_s']:,.0f} chunks/s, a {settings['latency_ms']:g} ms round trip per card call")
    fig.suptitle(title, fontsize=13)
    cap = max(60.0, settings["gen_s"] + settings["settle_s"])
    for row, platform in enumerate(platforms):
        mine = [r for r in report["scenarios"] if r["scenario"]["platform"] == platform]
        _latency_panel(axes[row][0], mine, "first_text_s", f"{platform}: first answer text visible", cap)
        _latency_panel(axes[row][1], mine, "complete_s", f"{platform}: complete exact answer visible", cap)
        _calls_panel(axes[row][2], mine)
        worst = max(mine, key=lambda r: (_sort_key(r["complete_s"]["p95"], r["complete_s"].get("failed", 0)), r["scenario"]["n"]))
        _timeline_panel(axes[row][3], worst)
    if core:
        core_chart_row(axes[len(platforms)], core)
    machine = report["machine"]
    fig.text(0.01, 0.005, f"{report['started_at']} · {machine['usable_cpus']} CPUs, load {machine['loadavg'][0]:.2f} · "
             f"{report['reproduce']['python']}", fontsize=8, color="#555")
    fig.tight_layout(rect=(0, 0.02, 1, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
