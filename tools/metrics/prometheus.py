"""Prometheus's HTTP API as a metric source: instant and range queries, series and label lookups, errors in words.

A range is bounded to about :data:`MAX_POINTS` points per series by raising
the step, and a result over many series is cut to the :data:`MAX_SERIES`
with the largest values; both are said in the result. Failures become a
:class:`MetricsError` whose reason never holds the URL's credentials or a
header's value.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from yarl import URL

from tools.metrics.series import Series, unit_of

__all__ = ["MAX_POINTS", "MAX_SERIES", "MetricsError", "PrometheusSource", "RangeResult", "choose_step"]

MAX_POINTS = 500
"""Points per series a range query returns at most; a finer step is raised."""
MAX_SERIES = 10
"""Series a query returns at most: those with the largest values."""
_NICE_STEPS_S = (15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
"""Steps a chart reads well at; the bound picks the smallest that fits."""
_REASON_CHARS = 300

ErrorKind = Literal["bad_query", "unreachable", "timeout", "error"]


class MetricsError(Exception):
    """A metric source's failure, in words a model (and the card) can act on."""

    def __init__(self, kind: ErrorKind, reason: str) -> None:
        super().__init__(reason)
        self.kind: ErrorKind = kind
        """``bad_query`` (fix the expression), ``unreachable``, ``timeout`` or ``error``."""
        self.reason = reason
        """What went wrong, without credentials."""


@dataclass(frozen=True)
class RangeResult:
    """What a range query gave back, and how it was bounded."""

    series: tuple[Series, ...]
    """The series kept, largest peak first."""
    start: float
    """Unix time of the first step."""
    end: float
    """Unix time of the last step."""
    step_s: int
    """The step used, in seconds."""
    requested_step_s: int | None
    """The step asked for, when one was; smaller than :attr:`step_s` when the bound raised it."""
    total_series: int
    """Series the query matched before the cut."""
    fetched_at: float
    """Unix time of the answer."""

    @property
    def left_out(self) -> int:
        """Series cut off by :data:`MAX_SERIES`."""
        return self.total_series - len(self.series)

    @property
    def step_raised(self) -> bool:
        """Whether the asked step was raised to stay within :data:`MAX_POINTS`."""
        return self.requested_step_s is not None and self.step_s > self.requested_step_s


def choose_step(span_s: float, requested_s: int | None, *, max_points: int = MAX_POINTS) -> int:
    """The step for a range of ``span_s`` seconds: the asked one when it stays within ``max_points`` points,
    else (or when none was asked) the smallest chart-friendly step that does."""
    least = math.ceil(span_s / max(1, max_points - 1))
    if requested_s is not None and requested_s >= least:
        return max(1, requested_s)
    if requested_s is None:
        least = max(least, math.ceil(span_s / 250))  # the default aims at half the bound: plenty for a chart
    return next((s for s in _NICE_STEPS_S if s >= least), least)


class PrometheusSource:
    """One Prometheus server, read through its HTTP API (``/api/v1``)."""

    def __init__(
        self,
        url: str,
        *,
        session: aiohttp.ClientSession | None = None,
        session_factory: Callable[[], aiohttp.ClientSession] | None = None,
        timeout_s: float = 10.0,
        headers: Mapping[str, str] | None = None,
        max_series: int = MAX_SERIES,
        max_points: int = MAX_POINTS,
    ) -> None:
        """``session``: a shared session the caller closes; else one from ``session_factory`` (default: a new
        :class:`aiohttp.ClientSession`), made on first use and closed by :meth:`close`."""
        base = URL(url.rstrip("/"))
        self._base = base.with_user(None)
        # Credentials in the URL become basic auth, unless a header already authorizes (aiohttp refuses both).
        has_header = any(k.lower() == "authorization" for k in (headers or {}))
        self._auth = aiohttp.BasicAuth(base.user or "", base.password or "") if base.user and not has_header else None
        self._session = session
        self._owns_session = session is None
        self._factory = session_factory or aiohttp.ClientSession
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._timeout_s = timeout_s
        self._headers = dict(headers or {})
        self.max_series = max_series
        """Series kept per query."""
        self.max_points = max_points
        """Points per series a range keeps at most."""

    @property
    def where(self) -> str:
        """``host:port`` of the server, safe to show (no user, password or query string)."""
        return f"{self._base.host}:{self._base.port}" if self._base.host else "the configured URL"

    async def close(self) -> None:
        """Close the session this source made (a shared one stays open)."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def instant(self, query: str, at: float | None = None) -> tuple[Series, ...]:
        """``/api/v1/query``: each series' value at ``at`` (default now), largest first, cut to :attr:`max_series`."""
        form = {"query": query} | ({"time": f"{at:.3f}"} if at is not None else {})
        series = _parse_result(await self._call("query", form))
        return tuple(sorted(series, key=lambda s: -s.peak())[: self.max_series])

    async def range(self, query: str, start: float, end: float, step_s: int | None = None) -> RangeResult:
        """``/api/v1/query_range`` from ``start`` to ``end``, the step bounded by :func:`choose_step`."""
        step = choose_step(end - start, step_s, max_points=self.max_points)
        form = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)}
        series = sorted(_parse_result(await self._call("query_range", form)), key=lambda s: -s.peak())
        return RangeResult(
            series=tuple(series[: self.max_series]),
            start=start,
            end=end,
            step_s=step,
            requested_step_s=step_s,
            total_series=len(series),
            fetched_at=time.time(),
        )

    async def series(self, matchers: Sequence[str], start: float, end: float) -> tuple[dict[str, str], ...]:
        """``/api/v1/series``: the label sets of the series matching any of ``matchers`` in the time range."""
        form: list[tuple[str, str]] = [("match[]", m) for m in matchers]
        form += [("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        data = await self._call("series", form)
        return tuple({str(k): str(v) for k, v in item.items()} for item in data or ())

    async def label_values(self, label: str, matchers: Sequence[str] = ()) -> tuple[str, ...]:
        """``/api/v1/label/<label>/values``, optionally of the series matching ``matchers``."""
        data = await self._call(f"label/{label}/values", [("match[]", m) for m in matchers])
        return tuple(str(v) for v in data or ())

    async def _call(self, path: str, form: Mapping[str, str] | Sequence[tuple[str, str]]) -> Any:
        """POST ``form`` to ``/api/v1/<path>`` (label values: GET) and return its ``data``, or raise MetricsError."""
        if self._session is None:
            self._session = self._factory()
        url = self._base / f"api/v1/{path}"
        get = path.startswith("label/")
        try:
            async with self._session.request(
                "GET" if get else "POST",
                url,
                params=form if get else None,
                data=None if get else form,
                headers=self._headers,
                auth=self._auth,
                timeout=self._timeout,
            ) as response:
                return _data_of(response.status, await response.read())
        except TimeoutError:
            why = f"Prometheus at {self.where} did not answer within {self._timeout_s:g}s"
            raise MetricsError("timeout", why) from None
        except aiohttp.ClientConnectorError as exc:
            why = exc.os_error.strerror or type(exc.os_error).__name__
            raise MetricsError("unreachable", f"cannot connect to Prometheus at {self.where}: {why}") from None
        except aiohttp.ClientError as exc:
            raise MetricsError("unreachable", f"Prometheus at {self.where} failed: {type(exc).__name__}") from None


def _data_of(status: int, body: bytes) -> Any:
    """The ``data`` of an API answer, or the MetricsError it stands for (Prometheus's own words where it gave some)."""
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and answer.get("status") == "success":
        return answer.get("data")
    if isinstance(answer, dict) and answer.get("status") == "error":
        kind: ErrorKind = "bad_query" if answer.get("errorType") in ("bad_data", "execution") else "error"
        if answer.get("errorType") == "timeout":
            kind = "timeout"
        reason = f"{answer.get('errorType', 'error')}: {answer.get('error', '')}"
        raise MetricsError(kind, _shorten(reason))
    if status in (401, 403):
        raise MetricsError("error", f"Prometheus refused access (HTTP {status}); check the configured headers")
    raise MetricsError("error", f"Prometheus answered HTTP {status} without a usable body")


def _parse_result(data: Any) -> list[Series]:
    """Series from a ``matrix``, ``vector`` or ``scalar`` result; non-finite values dropped."""
    kind, result = (data or {}).get("resultType"), (data or {}).get("result")
    if kind == "scalar":
        result = [{"metric": {}, "value": result}]
    if kind not in ("matrix", "vector", "scalar") or not isinstance(result, list):
        raise MetricsError("error", f"Prometheus returned a {kind or 'malformed'} result, not series")
    series: list[Series] = []
    for item in result:
        labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
        raw = item.get("values") or ([item["value"]] if item.get("value") else [])
        points = tuple((float(t), v) for t, s in raw if math.isfinite(v := float(s)))
        series.append(Series(labels, points, unit_of(labels.get("__name__", ""))))
    return series


def _shorten(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= _REASON_CHARS else one[: _REASON_CHARS - 1] + "…"
