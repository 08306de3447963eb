"""The benchmark's knobs: one frozen dataclass, parsed from the command line.

A run is a set of *scenarios*: platform (Slack with ``streaming: auto`` or
``edit``, DingTalk) × N concurrent mentions × arrival (``burst``: all at once,
``spread``: evenly over ``spread_s``), then the ``core`` platform: N
concurrent turns (``core_turns``) submitted at once through the Gateway into
an in-process sink, the model offering ``core_chunks_per_s`` in all, in one
worker process or split over ``workers`` of them sharing Redis. Each Slack
scenario (and DingTalk's) runs once per count of ``replicas``: above 1, that many
botgateway processes sharing Redis. ``incident`` puts N Slack askers in one
channel, ``crash`` kills every gateway process mid-burst and starts it again. Every
scenario uses the same seeded answers, so turn *i* asks and gets the same
thing everywhere.
:meth:`BenchSettings.to_argv` gives back the exact flags, so the report can
print the command that reproduces it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from botgateway.config import MAX_WORKERS

PLATFORMS: tuple[str, ...] = ("slack", "dingtalk", "incident", "crash", "core", "estate", "charts")
"""Platforms, in the order they run (``incident``: N askers in one Slack channel, see :mod:`bench.incident`;
``crash``: ``kill -9`` mid-burst and a restart, on Slack, see :mod:`bench.crash`; ``core``: the Gateway into the
bench's own sink, no chat platform; ``estate``: ``find_resource`` over the clouds' fakes, see :mod:`bench.estate`;
``charts``: chart render timings and the platform calls a chart adds to an answer, see :mod:`bench.charts`)."""

STREAM_STARTS: tuple[str, ...] = ("counted", "uncounted")
"""``incident``: whether a ``chat.startStream`` is one of its channel's new messages (the fake and the adapter's
``stream_starts_per_channel`` alike), or draws from the workspace's Tier 2 alone."""


CHART_PLATFORMS: tuple[str, ...] = ("slack", "dingtalk")
"""The chat platforms the ``charts`` scenario counts a chart's calls on."""

ESTATE_PROVIDERS: tuple[str, ...] = ("aliyun", "tencent", "aws")
"""The clouds the ``estate`` scenario can fan out over."""

SLACK_MODES: tuple[str, ...] = ("auto", "edit")
"""Slack adapter ``streaming`` modes the bench runs."""

ARRIVALS: tuple[str, ...] = ("burst", "spread")
"""``burst``: every mention at once; ``spread``: evenly over ``spread_s`` seconds."""

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
"""Where reports go unless ``--out`` says otherwise (git-ignored)."""


@dataclass(frozen=True)
class Scenario:
    """One measured run: a fresh worker process, fresh fakes and a fresh model server."""

    platform: str
    """``slack``, ``dingtalk``, ``core``, ``estate`` or ``charts``."""
    mode: str
    """Slack's ``streaming`` mode (``auto`` / ``edit``); ``card`` for DingTalk; empty for ``core`` and ``charts``."""
    n: int
    """Concurrent mentions (core: concurrent turns)."""
    arrival: str
    """``burst`` or ``spread``."""
    workers: int = 1
    """``core``: the worker processes the turns are split over (above 1 they share the Redis store)."""
    replicas: int = 1
    """``slack`` and ``dingtalk``: botgateway processes (replicas) behind a load balancer; above 1 they share the
    Redis store. Slack's take the events over HTTP, every mention delivered to each of them (Slack's retries, a
    balancer's); DingTalk's each hold a Stream connection, and the fake hands the messages to them in turn."""
    variant: str = ""
    """Slack: ``""`` one channel per mention; ``incident``: every mention in one channel, stream starts counted in
    its bucket (``incident-uncounted``: not counted); ``crash``: every process killed (``kill -9``) mid-burst and
    started again."""

    @property
    def one_channel(self) -> bool:
        """Every mention is in the same channel (the incident)."""
        return self.variant.startswith("incident")

    @property
    def stream_starts_counted(self) -> bool:
        """A ``chat.startStream`` is one of its channel's new messages (the fake's and the adapter's default)."""
        return self.variant != "incident-uncounted"

    def variant_text(self) -> str:
        """``incident (one channel, stream starts counted)``; empty for the usual shape."""
        if self.variant == "crash":
            return "crash + restart"
        if not self.one_channel:
            return ""
        if self.mode == "edit":
            return "incident (one channel)"
        return f"incident (one channel, stream starts {'counted' if self.stream_starts_counted else 'not counted'})"

    @property
    def name(self) -> str:
        """``slack/edit N=50 burst``; ``slack/auto N=50 burst, 2 replicas``; ``core N=1000 burst, 2 workers``."""
        kind = f"{self.platform}/{self.mode}" if self.mode else self.platform
        fleet = f", {self.variant_text()}" if self.variant else ""
        fleet += f", {self.workers} workers" if self.workers > 1 else ""
        fleet += f", {self.replicas} replicas" if self.replicas > 1 else ""
        return f"{kind} N={self.n} {self.arrival}{fleet}"

    @property
    def key(self) -> str:
        """A file-name-safe id: ``slack-edit-50-burst``; ``slack-auto-50-burst-r2``; ``core-1000-burst-w2``;
        ``slack-auto-30-burst-incident-uncounted``."""
        fleet = f"w{self.workers}" if self.workers > 1 else ""
        fleet += f"r{self.replicas}" if self.replicas > 1 else ""
        parts = (self.platform, self.mode, str(self.n), self.arrival, self.variant, fleet)
        return "-".join(part for part in parts if part)


@dataclass(frozen=True)
class BenchSettings:
    """One benchmark run's parameters (shared by every scenario of the run)."""

    platforms: tuple[str, ...] = PLATFORMS
    """Platforms to run."""
    slack_modes: tuple[str, ...] = SLACK_MODES
    """Slack ``streaming`` modes to run."""
    ns: tuple[int, ...] = (10, 50, 100)
    """Numbers of concurrent mentions (Slack and DingTalk)."""
    core_turns: tuple[int, ...] = (200, 1000)
    """Numbers of concurrent turns of the ``core`` platform (always a burst)."""
    core_chunks_per_s: float = 12_000.0
    """``core``: answer chunks per second the model offers over all turns together; each turn streams one chunk
    every ``N / core_chunks_per_s`` seconds, so every N offers the same load."""
    workers: int = 1
    """``core``: worker processes, built as ``botgateway run --workers`` builds them (the Redis store on
    127.0.0.1:6379 above 1); turn *i* goes to worker ``i % workers``. The chat platforms run one worker."""
    replicas: tuple[int, ...] = (1,)
    """``slack``, ``dingtalk``, ``incident``, ``crash``: each scenario runs once per count, one replica first. Above
    1, that many worker processes, each a replica of its own (``gateway.replicas``, its own instance id) sharing the
    Redis on 127.0.0.1:6379. Slack's in HTTP Events mode: mention *i* is posted to replica ``i % K`` first, then to
    every other one; DingTalk's each hold a Stream connection, taking the messages in turn."""
    incident_n: tuple[int, ...] = (30,)
    """``incident``: numbers of askers, all in one Slack channel at once."""
    incident_stream_starts: tuple[str, ...] = STREAM_STARTS
    """``incident``: with stream starts counted in the channel's bucket, without, or both (auto mode; edit mode makes
    no stream and runs once)."""
    crash_n: int = 20
    """``crash``: questions at once, one Slack channel each."""
    crash_at_s: float = 3.0
    """``crash``: seconds after the burst at which every gateway process is killed (``kill -9``), then started
    again."""
    arrivals: tuple[str, ...] = ARRIVALS
    """Arrival patterns."""
    spread_s: float = 60.0
    """``spread`` arrivals: mention *i* of N arrives at ``i * spread_s / N``."""
    gen_s: float = 6.4
    """How long the model takes to stream each answer (paced against the clock, not per chunk)."""
    answer_chars: tuple[int, int] = (1100, 1300)
    """Answer length range in characters; each turn draws one (seeded)."""
    chunk_chars: int = 4
    """Characters per streamed chunk."""
    tool_rounds: int = 0
    """Rounds of one inventory tool call (``search_inventory_by_ip``) before the answer; not part of ``gen_s``."""
    channels: int = 0
    """Slack channels the mentions are spread over (round robin); 0: one channel per mention."""
    latency_ms: float = 50.0
    """How long each fake platform API call takes before it is answered (and becomes visible)."""
    post_burst: int = 3
    """Slack ``chat.postMessage``: at most this many per channel in any window of this many seconds (~1/s with short bursts)."""
    dingtalk_qps: int = 20
    """DingTalk card API calls per sliding second for the whole app (answered 403 QpsLimit past it)."""
    settle_s: float = 90.0
    """After the last arrival plus ``gen_s``, how long answers may still arrive before the rest count as undelivered."""
    live_check_s: float = 10.0
    """How long after the last answer the bench counts messages that still look live."""
    seed: int = 7
    """Seed of the answers (the same for every scenario)."""
    config: str = ""
    """A botgateway config whose ``card`` section and adapters' ``policy`` the gateway uses; empty: defaults."""
    out: str = str(DEFAULT_OUT)
    """Folder for the JSON report and the PNG chart."""
    profile: bool = False
    """``core``: run the worker under cProfile and write its profile next to the report (timings are then not
    representative)."""
    worker_timeout_s: float = 900.0
    """A scenario whose worker runs longer than this is killed and reported as failed."""
    estate_providers: tuple[str, ...] = ESTATE_PROVIDERS
    """``estate``: the clouds ``find_resource`` fans out over."""
    estate_accounts: int = 2
    """``estate``: accounts per cloud, each its own fake."""
    estate_regions: int = 3
    """``estate``: regions per account (at most 3)."""
    estate_cold_runs: int = 15
    """``estate``: cold lookups, each on a freshly built toolset."""
    estate_warm_calls: int = 200
    """``estate``: warm lookups on one toolset."""
    estate_delay_ms: float = 100.0
    """``estate``: how long every fake cloud API call takes."""
    charts_renders: int = 40
    """``charts``: timed renders of each chart one at a time, and as many again two at once."""
    charts_answers: int = 10
    """``charts``: answers at once per run of the calls count (one run without a chart, one with)."""
    charts_platforms: tuple[str, ...] = CHART_PLATFORMS
    """``charts``: the chat platforms whose calls per answer are counted (none: render timings only)."""

    def scenarios(self) -> list[Scenario]:
        """Every scenario of the run, in the order they run."""
        out: list[Scenario] = []
        for platform in self.platforms:
            if platform == "core":
                out.extend(Scenario("core", "", n, "burst", self.workers) for n in self.core_turns)
                continue
            if platform == "estate":  # N: the cold runs
                shape = f"{len(self.estate_providers)}x{self.estate_accounts}x{self.estate_regions}"
                out.append(Scenario("estate", shape, self.estate_cold_runs, "cold+warm"))
                continue
            if platform == "charts":  # N: the renders of each chart
                out.append(Scenario("charts", "", self.charts_renders, "renders+calls"))
                continue
            fleets = sorted(self.replicas)
            if platform == "incident":
                out.extend(Scenario("slack", mode, n, "burst", replicas=k, variant=variant)
                           for mode, variant in self._incident_variants() for n in self.incident_n for k in fleets)
                continue
            if platform == "crash":
                out.extend(Scenario("slack", mode, self.crash_n, "burst", replicas=k, variant="crash")
                           for mode in self.slack_modes for k in fleets)
                continue
            modes = self.slack_modes if platform == "slack" else ("card",)
            for mode in modes:
                for n in self.ns:
                    for arrival in self.arrivals:
                        out.extend(Scenario(platform, mode, n, arrival, replicas=k) for k in fleets)
        return out

    def _incident_variants(self) -> list[tuple[str, str]]:
        """``(mode, variant)`` of the incident scenarios: edit mode once (it makes no stream)."""
        out = []
        for mode in self.slack_modes:
            for starts in self.incident_stream_starts:
                if mode == "edit" and starts == "uncounted":
                    continue
                out.append((mode, "incident" if starts == "counted" else "incident-uncounted"))
            if mode == "edit" and self.incident_stream_starts == ("uncounted",):
                out.append((mode, "incident"))
        return out

    def arrival_offsets(self, scenario: Scenario) -> list[float]:
        """Seconds after the start at which each mention of ``scenario`` arrives."""
        if scenario.arrival == "burst":
            return [0.0] * scenario.n
        return [i * self.spread_s / scenario.n for i in range(scenario.n)]

    def channel_of(self, turn: int) -> int:
        """The Slack channel number of mention ``turn`` (the usual shape: ``--channels``)."""
        return turn % self.channels if self.channels else turn

    def channels_of(self, scenario: Scenario) -> list[int]:
        """The channel number of each mention of ``scenario``: all 0 in an incident."""
        return [0 if scenario.one_channel else self.channel_of(turn) for turn in range(scenario.n)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready settings (tuples become lists)."""
        data = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchSettings:
        """The inverse of :meth:`to_dict` (used by the worker subprocess)."""
        names = {f.name for f in fields(cls)}
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names}
        return cls(**values)

    def to_argv(self) -> list[str]:
        """Flags that reproduce these settings (``--out`` left out: results go wherever the reader wants)."""

        def num(value: float) -> str:
            return f"{value:g}"

        argv = [
            "--platform", "all" if set(self.platforms) == set(PLATFORMS) else ",".join(self.platforms),
            "--slack-modes", ",".join(self.slack_modes),
            "--n", ",".join(str(n) for n in self.ns),
            "--core-turns", ",".join(str(n) for n in self.core_turns),
            "--core-chunks-per-s", num(self.core_chunks_per_s),
            "--workers", str(self.workers),
            "--replicas", ",".join(str(k) for k in self.replicas),
            "--arrivals", ",".join(self.arrivals),
            "--spread-s", num(self.spread_s),
            "--gen-s", num(self.gen_s),
            "--answer-chars", f"{self.answer_chars[0]}-{self.answer_chars[1]}",
            "--chunk-chars", str(self.chunk_chars),
            "--tool-rounds", str(self.tool_rounds),
            "--channels", str(self.channels),
            "--latency-ms", num(self.latency_ms),
            "--post-burst", str(self.post_burst),
            "--dingtalk-qps", str(self.dingtalk_qps),
            "--settle-s", num(self.settle_s),
            "--live-check-s", num(self.live_check_s),
            "--seed", str(self.seed),
            "--estate-providers", ",".join(self.estate_providers),
            "--estate-accounts", str(self.estate_accounts),
            "--estate-regions", str(self.estate_regions),
            "--estate-cold-runs", str(self.estate_cold_runs),
            "--estate-warm-calls", str(self.estate_warm_calls),
            "--estate-delay-ms", num(self.estate_delay_ms),
            "--charts-renders", str(self.charts_renders),
            "--charts-answers", str(self.charts_answers),
            "--charts-platforms", ",".join(self.charts_platforms) or "none",
            "--incident-n", ",".join(str(n) for n in self.incident_n),
            "--incident-stream-starts", ",".join(self.incident_stream_starts),
            "--crash-n", str(self.crash_n),
            "--crash-at-s", num(self.crash_at_s),
        ]  # fmt: skip
        if self.config:
            argv += ["--config", self.config]
        if self.profile:
            argv.append("--profile")
        return argv


def _number(flag: str, cast: Callable[[str], Any], *, allow_zero: bool = False) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a number, not {text!r}") from None
        if value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"{flag} must be {'>= 0' if allow_zero else '> 0'}, not {text}")
        return value

    return parse


def _choices(flag: str, known: Sequence[str], *, all_word: bool = False) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        if all_word and text.strip() == "all":
            return tuple(known)
        picked = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
        unknown = [p for p in picked if p not in known]
        if unknown or not picked:
            raise argparse.ArgumentTypeError(
                f"{flag} takes a comma-separated subset of {','.join(known)}{' or all' if all_word else ''}"
                f"{'; unknown: ' + ','.join(unknown) if unknown else ''}"
            )
        return picked

    return parse


def _counts(flag: str, example: str) -> Callable[[str], tuple[int, ...]]:
    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(dict.fromkeys(int(p) for p in text.split(",") if p.strip()))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes comma-separated numbers like {example}, not {text!r}") from None
        if not values or min(values) < 1:
            raise argparse.ArgumentTypeError(f"{flag}: every N must be >= 1")
        return values

    return parse


def _platforms_or_none(text: str) -> tuple[str, ...]:
    """``--charts-platforms``: a subset of :data:`CHART_PLATFORMS`, or ``none``."""
    if text.strip() == "none":
        return ()
    return _choices("--charts-platforms", CHART_PLATFORMS)(text)


def _range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition("-")
    try:
        lo, hi = (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--answer-chars needs MIN-MAX or one number, not {text!r}") from None
    if lo < 20 or hi < lo:
        raise argparse.ArgumentTypeError("--answer-chars needs 20 <= MIN <= MAX")
    return lo, hi


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m bench`` argument parser (every flag's dest is the settings field it sets)."""
    d = BenchSettings()
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description=(
            "Benchmark botgateway end to end: N mentions pushed by a fake Slack (Socket Mode) or DingTalk "
            "(Stream mode), through the real adapters and Gateway in a worker process, to a scripted model; "
            "measures when each answer's text becomes visible on the fake platform, under its rate limits. "
            "The core platform submits N turns at once into an in-process sink and measures the core itself."
        ),
    )
    # In this order: --help lists the flags as they are added.
    _scenario_flags(p, d)
    _model_flags(p, d)
    _platform_flags(p, d)
    _run_flags(p, d)
    _estate_flags(p, d)
    _charts_flags(p, d)
    _incident_and_crash_flags(p, d)
    p.add_argument("--worker-timeout-s", type=_number("--worker-timeout-s", float), default=d.worker_timeout_s,
                   help=argparse.SUPPRESS)
    return p


def _scenario_flags(p: argparse.ArgumentParser, d: BenchSettings) -> None:
    """Which scenarios run: platforms, Slack modes, counts, workers, replicas and arrivals."""
    add = p.add_argument
    add("--platform", dest="platforms", type=_choices("--platform", PLATFORMS, all_word=True), default=d.platforms,
        help="slack, dingtalk, incident, crash, core, estate, charts or all (default all)")
    add("--slack-modes", type=_choices("--slack-modes", SLACK_MODES), default=d.slack_modes,
        help="Slack streaming modes to run (default auto,edit)")
    add("--n", dest="ns", type=_counts("--n", "10,50,100"), default=d.ns,
        help="comma-separated numbers of concurrent mentions, Slack and DingTalk (default 10,50,100)")
    add("--core-turns", type=_counts("--core-turns", "200,1000"), default=d.core_turns,
        help="comma-separated numbers of concurrent turns of the core platform (default 200,1000)")
    add("--core-chunks-per-s", type=_number("--core-chunks-per-s", float), default=d.core_chunks_per_s,
        help="core: answer chunks per second the model offers over all turns (default 12000)")
    add("--workers", type=_number("--workers", int), default=d.workers,
        help="core: worker processes sharing the Redis on 127.0.0.1:6379, as botgateway run --workers starts them "
             "(default 1: one process with SQLite)")
    add("--replicas", type=_counts("--replicas", "1,2,3"), default=d.replicas,
        help="slack, dingtalk, incident, crash: comma-separated numbers of replicas each scenario runs on, one replica "
             "first; above 1 they share the Redis on 127.0.0.1:6379 (Slack's take events over HTTP, every mention "
             "delivered to each; DingTalk's each hold a Stream connection) (default 1)")
    add("--arrivals", type=_choices("--arrivals", ARRIVALS), default=d.arrivals, help="burst, spread or both (default both)")
    add("--spread-s", type=_number("--spread-s", float), default=d.spread_s, help="spread arrivals over this many seconds (default 60)")


def _model_flags(p: argparse.ArgumentParser, d: BenchSettings) -> None:
    """The scripted model's answers: how long, how chunked, after how many tool rounds."""
    add = p.add_argument
    add("--gen-s", type=_number("--gen-s", float), default=d.gen_s, help="model generation time per answer (default 6.4)")
    add("--answer-chars", type=_range, default=d.answer_chars, metavar="MIN-MAX", help="answer length range (default 1100-1300)")
    add("--chunk-chars", type=_number("--chunk-chars", int), default=d.chunk_chars, help="characters per model chunk (default 4)")
    add("--tool-rounds", type=_number("--tool-rounds", int, allow_zero=True), default=d.tool_rounds,
        help="inventory tool-call rounds before the answer (default 0)")


def _platform_flags(p: argparse.ArgumentParser, d: BenchSettings) -> None:
    """The fake chat platforms: channels, latency and rate limits."""
    add = p.add_argument
    add("--channels", type=_number("--channels", int, allow_zero=True), default=d.channels,
        help="Slack channels the mentions share (default 0: one channel per mention)")
    add("--latency-ms", type=_number("--latency-ms", float, allow_zero=True), default=d.latency_ms,
        help="fake platform API latency (default 50)")
    add("--post-burst", type=_number("--post-burst", int), default=d.post_burst,
        help="Slack chat.postMessage: this many per channel per this many seconds (default 3)")
    add("--dingtalk-qps", type=_number("--dingtalk-qps", int), default=d.dingtalk_qps, help="DingTalk card API QPS (default 20)")


def _run_flags(p: argparse.ArgumentParser, d: BenchSettings) -> None:
    """How a run waits, seeds, configures the gateway and reports."""
    add = p.add_argument
    add("--settle-s", type=_number("--settle-s", float), default=d.settle_s,
        help="how long after the last arrival + generation answers may still complete (default 90)")
    add("--live-check-s", type=_number("--live-check-s", float, allow_zero=True), default=d.live_check_s,
        help="count live-looking messages this long after the last answer (default 10)")
    add("--seed", type=int, default=d.seed, help=f"seed of the answers (default {d.seed})")
    add("--config", default=d.config, help="botgateway config to take the card section and the adapters' policy from")
    add("--out", default=d.out, help="folder for the JSON report and PNG chart (default bench/results/)")
    add("--profile", action="store_true", help="core: profile the worker with cProfile (slows it; timings not representative)")


def _estate_flags(p: argparse.ArgumentParser, d: BenchSettings) -> None:
    """The ``estate`` scenario: the clouds' fakes and the lookups over them."""
    add = p.add_argument
    add("--estate-providers", type=_choices("--estate-providers", ESTATE_PROVIDERS), default=d.estate_providers,
        help="estate: clouds find_resource fans out over (default aliyun,tencent,aws)")
    add("--estate-accounts", type=_number("--estate-accounts", int), default=d.estate_accounts,
        help="estate: accounts per cloud, each its own fake (default 2)")
    add("--estate-regions", type=_number("--estate-regions", int), default=d.estate_regions,
        help="estate: regions per account, at most 3 (default 3)")
    add("--estate-cold-runs", type=_number("--estate-cold-runs", int), default=d.estate_cold_runs,
        help="estate: cold lookups, each on a fresh toolset (default 15)")
    add("--estate-warm-calls", type=_number("--estate-warm-calls", int), default=d.estate_warm_calls,
        help="estate: warm lookups on one toolset (default 200)")
    add("--estate-delay-ms", type=_number("--estate-delay-ms", float, allow_zero=True), default=d.estate_delay_ms,
        help="estate: how long every fake cloud API call takes (default 100)")


def _charts_flags(p: argparse.ArgumentParser, d: BenchSettings) -> None:
    """The ``charts`` scenario: render timings and the calls a chart adds."""
    add = p.add_argument
    add("--charts-renders", type=_number("--charts-renders", int), default=d.charts_renders,
        help="charts: timed renders of each chart, one at a time and again two at once (default 40)")
    add("--charts-answers", type=_number("--charts-answers", int), default=d.charts_answers,
        help="charts: answers at once per run of the calls count, without and with a chart (default 10)")
    add("--charts-platforms", type=_platforms_or_none, default=d.charts_platforms,
        help="charts: slack, dingtalk, both (default) or none (render timings only)")


def _incident_and_crash_flags(p: argparse.ArgumentParser, d: BenchSettings) -> None:
    """The ``incident`` scenario (askers in one Slack channel) and the ``crash`` one (kill -9 and restart)."""
    add = p.add_argument
    add("--incident-n", type=_counts("--incident-n", "30"), default=d.incident_n,
        help="incident: comma-separated numbers of askers, all in one Slack channel (default 30)")
    add("--incident-stream-starts", type=_choices("--incident-stream-starts", STREAM_STARTS),
        default=d.incident_stream_starts,
        help="incident: stream starts counted in the channel's message bucket, uncounted, or both (default both)")
    add("--crash-n", type=_number("--crash-n", int), default=d.crash_n,
        help="crash: questions at once, one Slack channel each (default 20)")
    add("--crash-at-s", type=_number("--crash-at-s", float), default=d.crash_at_s,
        help="crash: kill -9 every gateway process this many seconds after the burst, then start it again (default 3)")


def parse_settings(argv: Sequence[str] | None = None) -> BenchSettings:
    """Settings from command-line flags (exits with a usage message on bad input, as argparse does)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.config and not Path(ns.config).is_file():
        parser.error(f"--config {ns.config}: no such file")
    if ns.workers > MAX_WORKERS:
        parser.error(f"--workers {ns.workers}: botgateway runs at most {MAX_WORKERS} worker processes")
    if max(ns.replicas) > MAX_WORKERS:
        parser.error(f"--replicas {max(ns.replicas)}: at most {MAX_WORKERS} replicas")
    if ns.estate_regions > 3:
        parser.error(f"--estate-regions {ns.estate_regions}: the fakes have 3 regions per cloud")
    if "core" in ns.platforms and ns.workers > min(ns.core_turns):
        parser.error(f"--workers {ns.workers} is more than the {min(ns.core_turns)} turns of a core scenario: "
                     "every worker needs a turn")
    return BenchSettings.from_dict(vars(ns))
