"""The benchmark's knobs: one frozen dataclass, parsed from the command line.

Every value has a default sized so ``make bench`` finishes in a few minutes on
two cores; :meth:`BenchSettings.to_argv` gives back the exact flags, so the
report can print the command that reproduces it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

STRATEGIES: tuple[str, ...] = ("ours", "every-chunk", "no-streaming")
"""Strategy names, in the order they run and are shown."""

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
"""Where reports go unless ``--out`` says otherwise (git-ignored)."""


class SettingsError(ValueError):
    """A flag value that cannot work; the message names the flag and what to pass."""


@dataclass(frozen=True)
class BenchSettings:
    """One benchmark run's parameters (shared by every strategy of the run)."""

    turns: int = 200
    """Concurrent turns per strategy, all started at once (unless ``ramp_s`` spreads them)."""
    ramp_s: float = 0.0
    """Spread the turns' arrivals evenly over this many seconds; 0 starts them all at once."""
    qps: float = 20.0
    """Card API rate limit for the whole app (the fake answers 429 past it; DingTalk: 20)."""
    server_burst: int = 0
    """Requests the fake card API accepts back to back before its rate applies; 0 means ``qps``."""
    tokens_per_s: float = 50.0
    """Model speed per turn: SSE chunks per second (one chunk is one token)."""
    chunk_chars: int = 4
    """Characters per streamed chunk (one token)."""
    tool_rounds: int = 1
    """Rounds of tool calls (each to a fast local tool) before the streamed answer."""
    tool_ms: float = 20.0
    """How long the local tool takes."""
    answer_chars: tuple[int, int] = (300, 600)
    """Answer length range in characters; each turn draws one (seeded)."""
    latency_ms: tuple[float, float] = (30.0, 80.0)
    """Card API latency range; each call draws one uniformly (429s included)."""
    final_deadline_s: float = 30.0
    """How long a final answer is retried before the sink's fallback message (``card.final_deadline_s``)."""
    strategies: tuple[str, ...] = STRATEGIES
    """Which strategies to run, in order."""
    seed: int = 7
    """Seed of answers, lengths and latencies."""
    config: str = ""
    """A botgateway config file to take ``adapters.dingtalk.policy`` and ``card`` from; empty uses the defaults."""
    out: str = str(DEFAULT_OUT)
    """Folder for the JSON report and the PNG chart."""
    worker_timeout_s: float = 900.0
    """A strategy whose worker runs longer than this is killed and reported as failed."""

    @property
    def effective_server_burst(self) -> int:
        """The fake API's bucket size."""
        return self.server_burst or max(1, int(round(self.qps)))

    @property
    def client_burst(self) -> int:
        """Bucket size the bench sink declares to the streamer's ``RateBudget``.

        Smaller than the server's bucket, so jitter between a call leaving the
        client and reaching the server (a busy event loop, the kernel) cannot
        push the server over its limit.
        """
        return max(1, int(self.qps // 4))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready settings (tuples become lists)."""
        data = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchSettings:
        """The inverse of :meth:`to_dict` (used by the worker subprocess)."""
        names = {f.name for f in fields(cls)}
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names}
        return cls(**values)

    def to_argv(self) -> list[str]:
        """Flags that reproduce these settings (``--out`` left out: results go wherever the reader wants)."""

        def num(value: float) -> str:
            return f"{value:g}"

        argv = [
            "--turns", str(self.turns),
            "--qps", num(self.qps),
            "--tokens-per-s", num(self.tokens_per_s),
            "--chunk-chars", str(self.chunk_chars),
            "--tool-rounds", str(self.tool_rounds),
            "--tool-ms", num(self.tool_ms),
            "--answer-chars", f"{self.answer_chars[0]}-{self.answer_chars[1]}",
            "--latency-ms", f"{num(self.latency_ms[0])}-{num(self.latency_ms[1])}",
            "--final-deadline-s", num(self.final_deadline_s),
            "--strategies", ",".join(self.strategies),
            "--seed", str(self.seed),
        ]  # fmt: skip
        if self.ramp_s:
            argv += ["--ramp-s", num(self.ramp_s)]
        if self.server_burst:
            argv += ["--server-burst", str(self.server_burst)]
        if self.config:
            argv += ["--config", self.config]
        return argv


def _range(flag: str, cast: type, *, minimum: float) -> Any:
    def parse(text: str) -> tuple[Any, Any]:
        parts = text.replace("..", "-").split("-")
        try:
            if len(parts) == 1:
                low = high = cast(parts[0])
            elif len(parts) == 2:
                low, high = cast(parts[0]), cast(parts[1])
            else:
                raise ValueError
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a number or a range like 30-80, not {text!r}") from None
        if low < minimum or high < low:
            raise argparse.ArgumentTypeError(f"{flag} needs {minimum} <= low <= high, got {text!r}")
        return (low, high)

    return parse


def _positive(flag: str, cast: type, *, allow_zero: bool = False) -> Any:
    def parse(text: str) -> Any:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a number, not {text!r}") from None
        if value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"{flag} must be {'>= 0' if allow_zero else '> 0'}, got {text!r}")
        return value

    return parse


def _strategies(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in STRATEGIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"--strategies takes a comma-separated list of {', '.join(STRATEGIES)}; unknown: {', '.join(unknown) or '(empty)'}"
        )
    return tuple(dict.fromkeys(names))


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m bench`` argument parser."""
    d = BenchSettings()
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description=(
            "Benchmark the card pipeline: N concurrent turns through the real ToolLoop and CardStreamer, "
            "a scripted model and a rate-limited fake card API on loopback; compares our buffer policy "
            "with updating on every chunk and with one message at the end."
        ),
    )
    p.add_argument("--turns", type=_positive("--turns", int), default=d.turns, help=f"concurrent turns per strategy (default {d.turns})")
    p.add_argument("--ramp-s", type=_positive("--ramp-s", float, allow_zero=True), default=d.ramp_s, help="spread arrivals evenly over this many seconds (default 0: all at once)")
    p.add_argument("--qps", type=_positive("--qps", float), default=d.qps, help=f"card API rate limit for the whole app (default {d.qps:g})")
    p.add_argument("--server-burst", type=_positive("--server-burst", int, allow_zero=True), default=d.server_burst, help="fake API bucket size (default: = qps)")
    p.add_argument("--tokens-per-s", type=_positive("--tokens-per-s", float), default=d.tokens_per_s, help=f"model chunks per second per turn (default {d.tokens_per_s:g})")
    p.add_argument("--chunk-chars", type=_positive("--chunk-chars", int), default=d.chunk_chars, help=f"characters per chunk (default {d.chunk_chars})")
    p.add_argument("--tool-rounds", type=_positive("--tool-rounds", int, allow_zero=True), default=d.tool_rounds, help=f"tool-call rounds before the answer (default {d.tool_rounds})")
    p.add_argument("--tool-ms", type=_positive("--tool-ms", float, allow_zero=True), default=d.tool_ms, help=f"local tool latency (default {d.tool_ms:g})")
    p.add_argument("--answer-chars", type=_range("--answer-chars", int, minimum=1), default=d.answer_chars, metavar="MIN-MAX", help="answer length range (default 300-600)")
    p.add_argument("--latency-ms", type=_range("--latency-ms", float, minimum=0), default=d.latency_ms, metavar="MIN-MAX", help="card API latency range (default 30-80)")
    p.add_argument("--final-deadline-s", type=_positive("--final-deadline-s", float), default=d.final_deadline_s, help=f"final-answer retry deadline (default {d.final_deadline_s:g})")
    p.add_argument("--strategies", type=_strategies, default=d.strategies, help=f"comma-separated subset of {','.join(STRATEGIES)} (default: all)")
    p.add_argument("--seed", type=int, default=d.seed, help=f"seed of answers and latencies (default {d.seed})")
    p.add_argument("--config", default=d.config, help="botgateway config to take the DingTalk buffer policy and card settings from")
    p.add_argument("--out", default=d.out, help="folder for the JSON report and PNG chart (default bench/results/)")
    p.add_argument("--worker-timeout-s", type=_positive("--worker-timeout-s", float), default=d.worker_timeout_s, help=argparse.SUPPRESS)
    return p


def parse_settings(argv: Sequence[str] | None = None) -> BenchSettings:
    """Settings from command-line flags (exits with a usage message on bad input, as argparse does)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.config and not Path(ns.config).is_file():
        parser.error(f"--config {ns.config}: no such file")
    # Every flag's dest is the field it sets.
    return BenchSettings.from_dict(vars(ns))
