"""What an alert's graph shows: the firing expression from its ``generatorURL``, split into series and threshold.

Alertmanager passes on the rule's ``generatorURL``
(``http://prom:9090/graph?g0.expr=node_load1+%3E+0.9&g0.tab=1``). The
expression is parsed with ``promql_parser``: a top-level comparison with a
number on one side (``node_load1 > 0.9``, ``0.9 < node_load1``,
``x > bool 2``, or the first such comparison of an ``and``/``or``/``unless``
chain) graphs its other side with the number as the threshold line; any other
expression is graphed whole, without a threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import promql_parser as pp

from tools.metrics.prometheus import MetricsError
from tools.metrics.scoping import to_promql

__all__ = ["AlertGraph", "alert_graph"]

_COMPARISONS = frozenset({">", ">=", "<", "<=", "==", "!="})
_MIRRORED = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "==": "==", "!=": "!="}
"""The comparison read from the other side: ``0.9 < x`` is ``x > 0.9``."""
_SET_OPERATORS = frozenset({"and", "or", "unless"})
_ARITHMETIC = {"+": float.__add__, "-": float.__sub__, "*": float.__mul__, "/": float.__truediv__}


@dataclass(frozen=True)
class AlertGraph:
    """What to graph for one alert rule."""

    expr: str
    """The PromQL to graph: the compared side of the rule's expression, or the whole expression."""
    threshold: float | None
    """The number the series is compared with; ``None`` when the rule has no numeric comparison."""
    comparison: str
    """How the series fires against :attr:`threshold`, series on the left (``>``: fires above it); empty
    without a threshold."""
    prometheus_url: str
    """The Prometheus that evaluated the rule (the generator URL without its page and query)."""


def alert_graph(generator_url: str) -> AlertGraph | None:
    """The graph of the rule behind ``generator_url``; ``None`` when it names no Prometheus expression that parses."""
    try:
        parts = urlsplit(generator_url.strip())
        exprs = parse_qs(parts.query).get("g0.expr")
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc or not exprs or not exprs[0].strip():
        return None
    text = exprs[0].strip()
    try:
        tree = pp.parse(text)
    except ValueError:
        return None
    # The graph page sits under the server's route prefix (``/prometheus/graph``): the API is beside it.
    base = urlunsplit((parts.scheme, parts.netloc, parts.path.rsplit("/", 1)[0], "", ""))
    found = _threshold(tree)
    if found is not None:
        side, threshold, comparison = found
        try:
            return AlertGraph(to_promql(side), threshold, comparison, base)
        except MetricsError:
            pass  # the side does not print back faithfully: graph the rule's own text instead
    return AlertGraph(text, None, "", base)


def _threshold(node: Any) -> tuple[Any, float, str] | None:
    """The compared side, the number and the comparison (series on the left) of the first numeric comparison."""
    while isinstance(node, pp.ParenExpr):
        node = node.expr
    if not isinstance(node, pp.BinaryExpr):
        return None
    op = str(node.op).lower()
    if op in _SET_OPERATORS:
        return _threshold(node.lhs) or _threshold(node.rhs)
    if op not in _COMPARISONS:
        return None
    right, left = _number(node.rhs), _number(node.lhs)
    if right is not None and left is None:
        return node.lhs, right, op
    if left is not None and right is None:
        return node.rhs, left, _MIRRORED[op]
    return None


def _number(node: Any) -> float | None:
    """The value of a constant expression of numbers (``0.9``, ``(80)``, ``-1``, ``80 * 1024``); else ``None``."""
    if isinstance(node, pp.NumberLiteral):
        return float(node.val)
    if isinstance(node, pp.ParenExpr):
        return _number(node.expr)
    if isinstance(node, pp.UnaryExpr):
        inner = _number(node.expr)
        return None if inner is None else -inner
    if isinstance(node, pp.BinaryExpr) and str(node.op) in _ARITHMETIC:
        lhs, rhs = _number(node.lhs), _number(node.rhs)
        if lhs is None or rhs is None or (str(node.op) == "/" and rhs == 0):
            return None
        return float(_ARITHMETIC[str(node.op)](lhs, rhs))
    return None
