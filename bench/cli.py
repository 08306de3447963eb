"""``python -m bench`` (``make bench``): run the scenarios, print the tables and goals, write JSON and PNG."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from bench.report import print_report, write_chart, write_json
from bench.scenario import run_benchmark
from bench.settings import parse_settings
from botgateway.cli.event_loop import run
from botgateway.config import ConfigError, load_config


def main(argv: Sequence[str] | None = None) -> int:
    """Run; exit 0 when every goal passed, 1 when some goal failed or a scenario could not run, 2 on bad input."""
    settings = parse_settings(argv)
    # Wide enough for the tables when the output goes to a file or a pipe (a terminal keeps its own width).
    console = Console() if sys.stdout.isatty() else Console(width=170)
    err = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=170)
    if settings.config:
        try:
            load_config(settings.config)
        except ConfigError as exc:
            err.print(f"--config {settings.config} is not usable:")
            for problem in exc.problems:
                err.print(f"  - {problem}", markup=False)
            return 2
    try:
        # The model and the fake platforms on uvloop too: they share the machine with the workers they measure.
        report = run(run_benchmark(settings, progress=lambda m: err.print(f"[dim]{m}[/]")), "auto")
    except KeyboardInterrupt:
        err.print("interrupted; no report written")
        return 130
    out = Path(settings.out)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    paths = [write_json(report, out / f"bench-{stamp}.json")]
    try:
        paths.append(write_chart(report, out / f"bench-{stamp}.png"))
    except ImportError:
        err.print("matplotlib is not installed: no chart (pip install 'botgateway[bench]')")
    print_report(report, console, paths=paths)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
