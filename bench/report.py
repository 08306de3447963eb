"""Presenting a benchmark report: a rich table, a JSON file and a PNG chart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

COLORS = {"ours": "#2b8a3e", "every-chunk": "#c92a2a", "no-streaming": "#1c7ed6"}


def _s(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _arrival(settings: dict[str, Any]) -> str:
    ramp = settings.get("ramp_s") or 0
    return f"arriving over {ramp:g} s" if ramp else "at once"


def _pair(summary: dict[str, Any], digits: int = 2) -> str:
    return f"{_s(summary['p50'], digits)} / {_s(summary['p99'], digits)}"


ROWS: list[tuple[str, Any]] = [
    ("first model output → first visible text, s (p50 / p99)", lambda s: _pair(s["first_visible_s"])),
    ("staleness of visible answer text, s (p50 / p99)", lambda s: _pair(s["staleness_s"])),
    ("question → card on screen, s (p50 / p99)", lambda s: _pair(s["ask_to_card_s"])),
    ("turn end → final answer visible, s (p50 / p99)", lambda s: _pair(s["final_latency_s"])),
    ("API calls per turn", lambda s: f"{s['api_calls_per_turn']:.1f}"),
    ("API calls (accepted / total)", lambda s: f"{s['api_calls_accepted']} / {s['api_calls']}"),
    ("throttled calls (429)", lambda s: str(s["throttled"])),
    ("final answers exact", lambda s: f"{s['delivered']}/{s['turns']} ({100 * s['delivery_rate']:.1f}%)"),
    ("  … on the card / by fallback message", lambda s: f"{s['delivered_on_card']} / {s['delivered_by_fallback']}"),
    ("CPU s per 1,000 streamed chunks", lambda s: _s(s["cpu_s_per_1k_chunks"], 3)),
    ("pipeline CPU s (fakes CPU s)", lambda s: f"{s['cpu_s']:.1f} ({s['fakes_cpu_s']:.1f})"),
    ("peak RSS, MB (before the run)", lambda s: f"{s['peak_rss_mb']:.0f} ({s['rss_before_run_mb']:.0f})"),
    ("model speed achieved, chars/s (p50)", lambda s: _s(s["model_chars_per_s"]["p50"], 0)),
    ("wall time, s", lambda s: f"{s['wall_s']:.1f}"),
]


def print_report(report: dict[str, Any], console: Console | None = None, *, paths: list[Path] = ()) -> None:
    """The side-by-side table, the verdict, the machine load and the command to reproduce."""
    console = console or Console()
    settings = report["settings"]
    strategies = report["strategies"]
    table = Table(
        title=(
            f"{settings['turns']} turns {_arrival(settings)} · card API {settings['qps']:g} QPS, "
            f"{settings['latency_ms'][0]:g}–{settings['latency_ms'][1]:g} ms · model {settings['tokens_per_s']:g} tok/s × "
            f"{settings['chunk_chars']} chars · {settings['tool_rounds']} tool round(s) · answers "
            f"{settings['answer_chars'][0]}–{settings['answer_chars'][1]} chars"
        ),
        title_justify="left",
    )
    table.add_column("metric")
    for name in strategies:
        table.add_column(name, justify="right", style="bold" if name == "ours" else None)
    for label, fmt in ROWS:
        table.add_row(label, *(fmt(s) for s in strategies.values()))
    console.print(table)

    for name, s in strategies.items():
        problems = []
        if s["lost_chars"]:
            problems.append(f"{s['lost_chars']} answer characters never visible")
        if s["finalized_with_wrong_text"]:
            problems.append(f"{s['finalized_with_wrong_text']} cards finalized with text other than the answer")
        if s["writes_after_final"]:
            problems.append(f"{s['writes_after_final']} writes after a card was finalized")
        if s["seq_regressions"]:
            problems.append(f"{s['seq_regressions']} out-of-order updates")
        if s["loop_answer_exact"] != s["turns"]:
            problems.append(f"the loop returned the exact answer for {s['loop_answer_exact']}/{s['turns']} turns")
        if s["crashes"]:
            problems.append("crashes: " + "; ".join(s["crashes"]))
        if s["undelivered_examples"]:
            problems.append("undelivered e.g. " + ", ".join(s["undelivered_examples"][:5]))
        if problems:
            console.print(f"[yellow]{name}:[/] " + "; ".join(problems))
    for name, error in report["failures"].items():
        console.print(f"[red]{name} failed:[/] {error}")

    checks = report["acceptance"]
    for key, ok in checks.items():
        if key != "passed":
            console.print(f"{'[green]✓' if ok else '[red]✗'}[/] {key.replace('_', ' ')}")
    verdict = "[green]PASSED[/]" if checks.get("passed") else "[red]FAILED[/]"
    console.print(f"acceptance (our policy): {verdict}")

    machine = report["machine"]
    load = " ".join(f"{x:.2f}" for x in machine["loadavg"])
    after = " ".join(f"{x:.2f}" for x in machine.get("loadavg_after", []))
    console.print(
        f"machine: {machine['usable_cpus']} usable of {machine['cpu_count']} CPUs · load average {load} before, "
        f"{after} after · Python {machine['python']} · {machine['platform']}"
    )
    console.print(f"reproduce: {report['reproduce']['make']}", soft_wrap=True)
    for path in paths:
        console.print(f"wrote {path}")


def write_json(report: dict[str, Any], path: Path) -> Path:
    """Write the full report as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return path


def write_chart(report: dict[str, Any], path: Path) -> Path:
    """A 2×4 chart: latency, staleness, calls, throttles, delivery, CPU, RSS and calls over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    strategies = report["strategies"]
    names = list(strategies)
    colors = [COLORS.get(n, "#868e96") for n in names]
    fig, axes = plt.subplots(2, 4, figsize=(18, 8.5))
    settings = report["settings"]
    fig.suptitle(
        f"botgateway card pipeline: {settings['turns']} turns {_arrival(settings)}, card API {settings['qps']:g} QPS "
        f"({settings['latency_ms'][0]:g}–{settings['latency_ms'][1]:g} ms), model {settings['tokens_per_s']:g} tok/s",
        fontsize=13,
    )

    def bars_p50_p99(ax: Any, key: str, title: str) -> None:
        x = range(len(names))
        p50 = [strategies[n][key]["p50"] or 0 for n in names]
        p99 = [strategies[n][key]["p99"] or 0 for n in names]
        ax.bar([i - 0.2 for i in x], p50, width=0.4, color=colors, label="p50")
        ax.bar([i + 0.2 for i in x], p99, width=0.4, color=colors, alpha=0.45, hatch="//", label="p99")
        ax.set_xticks(list(x), names)
        ax.set_title(title)
        ax.set_ylabel("seconds")
        ax.legend(fontsize=8)

    def bars(ax: Any, values: list[float], title: str, ylabel: str, fmt: str = "{:.0f}") -> None:
        ax.bar(names, values, color=colors)
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        for i, v in enumerate(values):
            ax.annotate(fmt.format(v), (i, v), ha="center", va="bottom", fontsize=9)

    bars_p50_p99(axes[0][0], "first_visible_s", "first model output → first visible text")
    bars_p50_p99(axes[0][1], "staleness_s", "staleness of visible answer text")
    bars(axes[0][2], [strategies[n]["api_calls_per_turn"] for n in names], "API calls per turn", "calls", "{:.1f}")
    bars(axes[0][3], [strategies[n]["throttled"] for n in names], "throttled calls (429)", "calls")
    bars(axes[1][0], [100 * strategies[n]["delivery_rate"] for n in names], "final answers delivered exactly", "%", "{:.1f}%")
    axes[1][0].set_ylim(0, 110)
    bars(axes[1][1], [strategies[n]["cpu_s_per_1k_chunks"] or 0 for n in names], "pipeline CPU per 1,000 chunks", "CPU seconds", "{:.3f}")
    bars(axes[1][2], [strategies[n]["peak_rss_mb"] for n in names], "peak RSS of the pipeline process", "MB")

    ax = axes[1][3]
    for n, color in zip(names, colors):
        timeline = strategies[n]["timeline"]
        ax.step(range(len(timeline["accepted"])), timeline["accepted"], where="post", color=color, label=f"{n} accepted")
        if any(timeline["throttled"]):
            ax.step(range(len(timeline["throttled"])), timeline["throttled"], where="post", color=color, linestyle=":", label=f"{n} throttled")
    ax.axhline(settings["qps"], color="black", linewidth=0.8, linestyle="--", label="limit")
    ax.set_title("card API calls per second")
    ax.set_xlabel("seconds since start")
    ax.set_yscale("symlog", linthresh=10)
    ax.legend(fontsize=7)

    machine = report["machine"]
    fig.text(
        0.01, 0.005,
        f"{report['started_at']} · {machine['usable_cpus']} CPUs, load {machine['loadavg'][0]:.2f} · {report['reproduce']['python']}",
        fontsize=8, color="#555",
    )  # fmt: skip
    fig.tight_layout(rect=(0, 0.02, 1, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
