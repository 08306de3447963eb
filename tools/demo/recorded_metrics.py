"""The sample estate's recorded metrics: an hour of evaluated node_exporter series, answered as Prometheus would.

The demo runs offline, yet "how is prod-db-01 doing?" deserves numbers. The
sample inventory ships with ``tools/sample_metrics.yaml``: one value a minute
per host and metric, as the host expressions of
:mod:`tools.metrics.prometheus_hosts` evaluate over node_exporter. A
:class:`RecordedSeries` answers those expressions (a range querier, like
:class:`~tools.metrics.prometheus.PrometheusSource`) with the recording moved
so that its newest value is the current minute (the query's end), and each step reads the last
value at or before it within Prometheus's five-minute lookback. It is offered
only on the sample estate (:func:`sample_recording`): its hosts are the only
ones recorded.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from botgateway.config import InventoryConfig
from tools.metrics.prometheus import MetricsError, RangeResult, choose_step
from tools.metrics.prometheus_hosts import recognize
from tools.metrics.series import Series
from tools.providers.inventory import resolve_path

__all__ = ["RECORDING", "SAMPLE_INVENTORY", "RecordedSeries", "Recording", "is_sample_estate", "load_recording",
           "sample_recording"]

SAMPLE_INVENTORY = Path(__file__).resolve().parent.parent / "sample_inventory.yaml"
"""The shipped sample inventory, the estate the recording belongs to."""
RECORDING = SAMPLE_INVENTORY.with_name("sample_metrics.yaml")
"""The recorded hour of its hosts' metrics."""
LABEL = "Recorded demo"
"""How provenance and the tool's text name the recording ("Recorded demo metrics of server prod-db-01 …")."""
API = "recorded node_exporter series"
"""What provenance says was read."""
_LOOKBACK_S = 300
"""How far back a step finds its value (Prometheus's default lookback delta)."""


@dataclass(frozen=True)
class Recording:
    """Evaluated series by ``instance`` label and metric name, one value every :attr:`step_s`, oldest first."""

    step_s: int
    """Seconds between values."""
    instances: Mapping[str, Mapping[str, tuple[float, ...]]]
    """``instance`` → our metric name → its values, the last one being the newest."""


def load_recording(path: Path = RECORDING) -> Recording:
    """The recording in ``path`` (see ``tools/sample_metrics.yaml`` for the format)."""
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    instances = {
        str(instance): {str(metric): tuple(float(v) for v in values) for metric, values in metrics.items()}
        for instance, metrics in (data.get("instances") or {}).items()
    }
    return Recording(int(data.get("step_s") or 60), instances)


def is_sample_estate(inventory: InventoryConfig) -> bool:
    """Whether ``inventory`` is the shipped sample estate (whose hosts have a recorded hour)."""
    return inventory.enabled and resolve_path(inventory.path).resolve() == SAMPLE_INVENTORY


def sample_recording(inventory: InventoryConfig) -> RecordedSeries | None:
    """The recorded series when ``inventory`` is the shipped sample estate; ``None`` for any other estate."""
    return RecordedSeries(load_recording()) if is_sample_estate(inventory) else None


class RecordedSeries:
    """A range querier over a :class:`Recording`, its newest value shifted to the current minute."""

    def __init__(self, recording: Recording, *, clock: Callable[[], float] = time.time) -> None:
        self.recording = recording
        """What it answers from."""
        self._clock = clock

    def anchor(self, end: float) -> float:
        """Unix time the newest recorded value stands for in a query ending at ``end``: the start of its minute (its
        recording step), so the newest value is always read, however the clock turns during the query."""
        step = self.recording.step_s
        return math.floor(min(end, self._clock()) / step) * step

    async def range(self, query: str, start: float, end: float, step_s: int | None = None) -> RangeResult:
        """The recorded series ``query`` (a host expression) selects, at each step from ``start`` to ``end``."""
        recognized = recognize(query)
        if recognized is None:
            raise MetricsError("bad_query", "the recorded demo series answer only the host metrics' own expressions")
        metric, pattern = recognized
        step = choose_step(end - start, step_s)
        anchor = self.anchor(end)
        series = [
            Series({"instance": instance}, self._evaluate(values, anchor, start, end, step))
            for instance, metrics in self.recording.instances.items()
            if pattern.fullmatch(instance) and (values := metrics.get(metric))
        ]
        return RangeResult(tuple(series), start, end, step, step_s, len(series), self._clock())

    def _evaluate(self, values: Sequence[float], anchor: float, start: float, end: float,
                  step: int) -> tuple[tuple[float, float], ...]:
        """The value at each step: the newest recorded one at or before it, within the lookback."""
        every = self.recording.step_s
        first = anchor - every * (len(values) - 1)
        points: list[tuple[float, float]] = []
        for n in range(int((end - start) // step) + 1):
            at = start + n * step
            index = min(len(values) - 1, math.floor((at - first) / every))
            if index >= 0 and at - (first + index * every) <= _LOOKBACK_S:
                points.append((at, values[index]))
        return tuple(points)
