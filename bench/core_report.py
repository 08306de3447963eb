"""Presenting the ``core`` scenarios: one table, the problems of each, and a row of the chart.

Latencies are milliseconds (see :mod:`bench.core_analysis` for what each one
spans); a percentile that reached a failed turn shows ``∞``.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from bench.core_analysis import cpu_cores_text

__all__ = ["core_chart_row", "core_problem_lines", "core_table"]


def _ms(value: float | None, summary: dict[str, Any]) -> str:
    if value is None:
        return "∞" if summary.get("failed") else "—"
    return f"{value:.1f}"


def _pct(summary: dict[str, Any] | None, *keys: str) -> str:
    if not summary:
        return "—"
    return " / ".join(_ms(summary.get(k), summary) for k in keys)


def core_table(results: list[dict[str, Any]], settings: dict[str, Any]) -> Table:
    """One row per core scenario."""
    workers = settings.get("workers", 1)
    where = (f"{workers} worker processes sharing Redis (RSS summed)" if workers > 1
             else "one worker process with SQLite")
    title = (f"core: N turns at once through the Gateway into the bench sink (round trip {settings['latency_ms']:g} ms, "
             f"no rate limit) in {where}, the model offering {settings['core_chunks_per_s']:,.0f} chunks/s in all "
             "· milliseconds")
    table = Table(title=title, title_justify="left")
    columns = ["scenario", "exact", "chunks", "chunks/s", "CPU s / 1k chunks", "CPU cores used / usable",
               "loop lag p50 / p99 / max",
               "history load p50 / p99 / max", "last token → final p50 / p99 / max", "… beyond a call in flight p50 / p99",
               "first text overhead p50 / p99",
               "first chunk → text p50 / p99", "mention → first chunk p50 / p99", "RSS MB"]
    for name in columns:
        table.add_column(name, justify="left" if name == "scenario" else "right")
    for r in results:
        table.add_row(
            r["scenario"]["name"],
            f"{r['exact']}/{r['answers']}",
            f"{r['chunks']:,}",
            f"{r['chunks_per_s']:,.0f}",
            "∞" if r["cpu_per_1k_chunks_s"] is None else f"{r['cpu_per_1k_chunks_s']:.3f}",
            f"{r['cpu_cores']:.2f} / {r['cores']}",
            _pct(r["loop_lag_ms"], "p50", "p99", "max"),
            _pct(r["history_load_ms"], "p50", "p99", "max"),
            _pct(r["last_token_to_final_ms"], "p50", "p99", "max"),
            _pct(r["final_beyond_in_flight_ms"], "p50", "p99"),
            _pct(r["first_text_overhead_ms"], "p50", "p99"),
            _pct(r["first_chunk_to_first_text_ms"], "p50", "p99"),
            _pct(r["mention_to_first_chunk_ms"], "p50", "p99"),
            f"{r['process']['peak_rss_bytes'] / 2**20:.0f}",
        )
    return table


def _worker_lines(result: dict[str, Any]) -> list[str]:
    """With several workers: the CPU cores they used together, then each worker's share, loop lag and memory."""
    workers = result["workers"]
    if len(workers) < 2:
        return []
    redis = result.get("redis_cpu_s")
    beside = "" if redis is None else f"; the Redis server's CPU {redis:.2f} s"
    lines = [f"  {cpu_cores_text(result)}: the workers' {result['cpu_s']:.2f} s over "
             f"{result['process']['wall_s']:.2f} s{beside}"]
    for w in workers:
        lag = _pct(w["loop_lag_ms"], "p50", "p99", "max")
        lines.append(f"  worker {w['index']} ({w['instance_id']}, {w['turns']} turns): CPU {w['cpu_s']:.2f} s, "
                     f"{w['cpu_cores']:.2f} of a core; loop lag p50 / p99 / max {lag} ms; "
                     f"RSS {w['peak_rss_bytes'] / 2**20:.0f} MB")
    return lines


def core_problem_lines(result: dict[str, Any]) -> list[str]:
    """The workers' CPU (each worker's, with several), failed turns, a model that could not keep its pace, the
    workers' warnings, the profiles written."""
    whose = "the workers'" if len(result["workers"]) > 1 else "worker"
    lines = [f"  {result['chunks']:,} chunks in {result['streaming_s']:.2f} s of streaming; "
             f"{whose} CPU {result['cpu_s']:.2f} s", *_worker_lines(result)]
    if result["failures"]:
        shown = ", ".join(f"#{f['turn']}: {f['problem']}" for f in result["failures"][:3])
        lines.append(f"  [yellow]{len(result['failures'])} failed turns[/] (∞ in every percentile), e.g. {shown}")
    late = result["model"].get("late_ms")
    if late and late.get("p99") is not None and late["p99"] > max(100.0, 2000 * result["model"]["chunk_interval_s"]):
        lines.append(f"  [yellow]the model's streams ended {late['p99']:.0f} ms late (p99): the machine was too busy "
                     f"to offer {result['offered_chunks_per_s']:,.0f} chunks/s[/]")
    for warning in result.get("worker_warnings", [])[-2:]:
        lines.append(f"  [dim]worker: {warning[:160]}[/]")
    for profile in result.get("profiles", []):
        lines.append(f"  profile (timings under cProfile are not representative): {profile}")
    return lines


def core_chart_row(axes: Any, results: list[dict[str, Any]]) -> None:
    """The chart's core row: p50/p99 of the three latencies, loop lag, and chunks/s per scenario."""
    names = [f"N={r['scenario']['n']}" + (f", {len(r['workers'])} workers" if len(r["workers"]) > 1 else "")
             for r in results]
    x = list(range(len(results)))
    panels = [("history_load_ms", "history load (ms)"), ("last_token_to_final_ms", "last token → final call (ms)"),
              ("first_text_overhead_ms", "first text overhead (ms)")]
    for ax, (key, title) in zip(axes[:3], panels, strict=True):
        finite = [v for r in results for v in (r[key]["p50"], r[key]["p99"]) if v is not None]
        top = max(finite, default=1.0) * 1.5  # a failure (∞) is drawn here
        p50 = [top if r[key]["p50"] is None else r[key]["p50"] for r in results]
        p99 = [top if r[key]["p99"] is None else r[key]["p99"] for r in results]
        ax.bar([i - 0.2 for i in x], p50, width=0.4, color="#5f3dc4", label="p50")
        ax.bar([i + 0.2 for i in x], p99, width=0.4, color="#5f3dc4", alpha=0.45, hatch="//", label="p99 (∞ at the top)")
        ax.set_xticks(x, names)
        ax.set_title(f"core: {title}")
        ax.legend(fontsize=7)
    ax = axes[3]
    ax.bar(x, [r["chunks_per_s"] for r in results], color="#2b8a3e", label="chunks/s sustained")
    ax.set_xticks(x, names)
    ax.set_title("core: chunks/s (loop lag p99 in ms above)")
    for i, r in enumerate(results):
        lag = r["loop_lag_ms"]["p99"]
        ax.annotate("—" if lag is None else f"{lag:.0f} ms", (i, r["chunks_per_s"]), ha="center", va="bottom", fontsize=8)
    ax.legend(fontsize=7)
