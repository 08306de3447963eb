"""A PromQL query narrowed to a scope: the scope's label matchers added to every selector, through the parsed AST.

The query is parsed with ``promql_parser``; every vector selector, wherever
it sits (inside a range, a subquery, a function, an aggregation, either side
of a binary operator), gets the scope's matchers beside its own, so the scope
can only narrow what the query reads: ``up{env="prod"}`` scoped to
``env!="prod"`` becomes ``up{env="prod",env!="prod"}`` and matches nothing.
The tree is printed back to PromQL, never spliced as text.

The binding prints string values without escaping them, so a value holding a
quote or a backslash would change the printed query's meaning. Values are
therefore escaped in the tree before printing, and the printed query is parsed
again and checked to be the tree that was meant, with every selector carrying
the scope; anything else refuses the query rather than send it unscoped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import promql_parser as pp

from botgateway.grant import Grant
from botgateway.tooling import ToolError
from tools.metrics.prometheus import MetricsError

__all__ = ["grant_matchers", "scope_query", "to_promql"]

_REASON_CHARS = 200
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
MatcherKey = tuple[str, str, str]
"""A matcher as data: operator, label name, value (unescaped)."""


def scope_query(promql: str, matchers: Sequence[str]) -> str:
    """``promql`` with ``matchers`` (``env!="prod"``) added to every vector selector, printed back as PromQL.

    Raises :class:`MetricsError` (``bad_query``) when the query does not parse, or holds what cannot be
    scoped safely (a selector with ``or`` inside its braces, a subquery without a step); ``error`` when a
    matcher is not a PromQL label matcher.
    """
    scope = [_scope_matcher(text) for text in matchers]
    if not scope:
        return promql
    tree = _parse(promql)
    try:
        _visit(tree, lambda node: _narrow(node, scope))
    except RecursionError:
        raise MetricsError("bad_query", "the query is nested too deeply to scope") from None
    text = to_promql(tree)
    _check_scoped(text, [_key(m) for m in scope])
    return text


def to_promql(node: Any) -> str:
    """``node`` (a ``promql_parser`` expression, changed in place: its string values get escaped) as PromQL text.

    Raises :class:`MetricsError` (``bad_query``) unless the text parses back to the same expression.
    """
    try:
        meant = _signature(node)
        _visit(node, _escape_strings)
        text = str(node)
        faithful = _signature(pp.parse(text)) == meant
    except (ValueError, MetricsError, RecursionError):
        faithful = False
    if not faithful:
        raise MetricsError("bad_query", "the query does not print back as written (a quoted label name, or a "
                                        "string the printer cannot keep); write it without")
    return text


def grant_matchers(grant: Grant | None) -> tuple[str, ...]:
    """The label matchers every metric query of ``grant``'s asker must carry; ``()`` for an unscoped asker.

    Raises :class:`ToolError` when a scope has none (it would read every series) or when the scopes' sets
    differ (a union of matcher sets is not one selector's matchers).
    """
    if grant is None or not grant.scopes:
        return ()
    roles = ", ".join(grant.roles) or "?"
    key = "access.roles.<role>.scopes[].metric_matchers"
    if not all(scope.metric_matchers for scope in grant.scopes):
        raise ToolError(f"query_metrics needs PromQL label matchers for your resource scopes, and a scope of your "
                        f"role ({roles}) has none: set {key} (e.g. env!=\"prod\") so a scoped asker never reads "
                        f"every series")
    sets = {frozenset(scope.metric_matchers) for scope in grant.scopes}
    if len(sets) > 1:
        raise ToolError(f"query_metrics cannot run under scopes whose metric matchers differ (role {roles}): one "
                        f"query takes one set; give every scope the same {key}")
    return tuple(dict.fromkeys(m for scope in grant.scopes for m in scope.metric_matchers))


def _parse(promql: str) -> Any:
    try:
        return pp.parse(promql)
    except ValueError as exc:
        raise MetricsError("bad_query", f"parse error: {_short(str(exc))}") from None


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 1] + "…"


def _scope_matcher(text: str) -> Any:
    """One configured matcher as the parser's :class:`promql_parser.Matcher` (its value unescaped, its regex checked)."""
    try:
        # Configuration, not the asker's query, and already held to ``name op "value"`` when the config loaded:
        # the parser reads it inside a selector of a placeholder metric (a selector needs one matcher that is not
        # empty, which ``env!="prod"`` alone is not), so the value's escapes and regex are checked as PromQL's.
        selector = pp.parse("scope{" + text + "}")
    except ValueError as exc:
        raise MetricsError("error", f"scope metric matcher {text!r} is not valid PromQL: {_short(str(exc))}") from None
    if not isinstance(selector, pp.VectorSelector):
        raise MetricsError("error", f"scope metric matcher {text!r} is not one PromQL label matcher like env!=\"prod\"")
    found = selector.matchers.matchers
    if len(found) != 1 or selector.matchers.or_matchers:
        raise MetricsError("error", f"scope metric matcher {text!r} is not one PromQL label matcher like env!=\"prod\"")
    return found[0]


def _key(matcher: Any) -> MatcherKey:
    return (str(matcher.op), str(matcher.name), str(matcher.value))


def _children(node: Any) -> list[Any]:
    """The sub-expressions of ``node``; raises for a kind of node this module does not know (fail closed)."""
    if isinstance(node, (pp.VectorSelector, pp.NumberLiteral, pp.StringLiteral)):
        return []
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector]
    if isinstance(node, (pp.ParenExpr, pp.UnaryExpr)):
        return [node.expr]
    if isinstance(node, pp.SubqueryExpr):
        return [node.expr]
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, pp.AggregateExpr):
        return [node.expr] if node.param is None else [node.param, node.expr]
    if isinstance(node, pp.Call):
        if not all(isinstance(arg, pp.Expr) for arg in node.args):
            raise MetricsError("bad_query", f"the arguments of {node.func.name}() cannot be scoped")
        return list(node.args)
    raise MetricsError("bad_query", f"a {type(node).__name__} in the query cannot be scoped")


def _visit(node: Any, act: Callable[[Any], None]) -> None:
    """``act`` on ``node`` and every node under it, on the live objects (the binding's ``walk`` hands out copies)."""
    act(node)
    for child in _children(node):
        _visit(child, act)


def _narrow(node: Any, scope: list[Any]) -> None:
    if isinstance(node, pp.SubqueryExpr) and node.step is None:
        raise MetricsError("bad_query", "under a scope a subquery needs an explicit step, e.g. [1h:1m]")
    if not isinstance(node, pp.VectorSelector):
        return
    if node.matchers.or_matchers:
        raise MetricsError("bad_query", "`or` inside a selector's braces cannot be scoped; join two selectors "
                                        "with the `or` operator instead")
    own = list(node.matchers.matchers)
    have = {_key(m) for m in own}
    # Beside, never instead of, the selector's own matchers on the same label: both must hold.
    added = [pp.Matcher(m.op, m.name, m.value) for m in scope if _key(m) not in have]
    node.matchers = pp.Matchers(own + added)


def _escaped(value: str) -> str:
    out = []
    for char in value:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return "".join(out)


def _escape_strings(node: Any) -> None:
    """Escape string values in place, as the printer writes them between double quotes as they are."""
    if isinstance(node, pp.StringLiteral):
        node.val = _escaped(node.val)
    elif isinstance(node, pp.VectorSelector):
        node.matchers = pp.Matchers([pp.Matcher(m.op, m.name, _escaped(m.value)) for m in node.matchers.matchers])


def _signature(node: Any) -> tuple[Any, ...]:
    """What ``node`` means, as comparable data (the binding's nodes compare by identity)."""
    kind = type(node).__name__
    if isinstance(node, pp.VectorSelector):
        own: tuple[Any, ...] = (node.name, tuple(_key(m) for m in node.matchers.matchers),
                                tuple(tuple(_key(m) for m in group) for group in node.matchers.or_matchers),
                                node.offset, _at(node.at))
    elif isinstance(node, pp.MatrixSelector):
        own = (node.range,)
    elif isinstance(node, pp.SubqueryExpr):
        own = (node.range, node.step, node.offset, _at(node.at))
    elif isinstance(node, pp.BinaryExpr):
        bin_mod = node.modifier
        own = (str(node.op),) if bin_mod is None else (
            str(node.op), str(bin_mod.card), bin_mod.return_bool, bin_mod.group_labels,
            None if bin_mod.matching is None else (str(bin_mod.matching.type), list(bin_mod.matching.labels)))
    elif isinstance(node, pp.AggregateExpr):
        agg_mod = node.modifier
        own = (str(node.op), None if agg_mod is None else (str(agg_mod.type), list(agg_mod.labels)))
    elif isinstance(node, pp.Call):
        own = (node.func.name,)
    elif isinstance(node, (pp.NumberLiteral, pp.StringLiteral)):
        own = (repr(node.val),)
    else:
        own = ()
    return (kind, own, tuple(_signature(child) for child in _children(node)))


def _at(at: Any) -> tuple[str, Any] | None:
    return None if at is None else (str(at.type), at.at)


def _check_scoped(text: str, scope: list[MatcherKey]) -> None:
    """Refuse ``text`` unless every selector in it carries the ``scope``, as the binding's own walk finds them
    (independent of this module's idea of which nodes hold selectors)."""
    unscoped: list[str] = []

    def scoped(node: Any) -> None:
        if isinstance(node, pp.VectorSelector):
            keys = {_key(m) for m in node.matchers.matchers}
            if node.matchers.or_matchers or not all(m in keys for m in scope):
                unscoped.append(str(node))

    pp.walk(pp.parse(text), pre_visit=scoped)
    if unscoped:
        raise MetricsError("bad_query", "the query could not be scoped safely; simplify it")
