"""Queries run under the asker's scopes: label matchers put into every PromQL selector, checked on a real Prometheus.

The unit matrix shows where the matchers land in each kind of expression; the
acceptance half loads prod and staging series into a real Prometheus and
shows that a viewer scoped to ``env!="prod"`` reads no prod value whatever
PromQL they write, while an unscoped asker reads the same queries in full.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from botgateway.access import Place, decide
from botgateway.config.access import AccessConfig
from botgateway.fleet.handoff import MovedQuestion
from botgateway.fleet.wire import moved_from_wire, moved_to_wire
from botgateway.grant import Grant, Scope
from botgateway.messages import InboundMessage
from botgateway.principal import Principal
from botgateway.sink import CardTarget
from botgateway.tooling import Tool, ToolContext, ToolError
from tests.prometheus_process import running_prometheus
from tools.metrics import MetricsError, PrometheusSource, build_metric_tools, grant_matchers, scope_query

NOT_PROD = 'env!="prod"'


def _flat(text: str) -> str:
    return " ".join(text.split())


# --- where the matchers land ----------------------------------------------------------------------------------------

MATRIX = [
    ("up", 'up{env!="prod"}'),
    ('up{env="prod"}', 'up{env="prod",env!="prod"}'),  # the asker's own matcher on the label stays: both must hold
    ('up{env=~"prod|staging"}', 'up{env=~"prod|staging",env!="prod"}'),
    ('{__name__=~".+"}', '{__name__=~".+",env!="prod"}'),
    ('{__name__="up"}', '{__name__="up",env!="prod"}'),
    ("rate(http_requests_total[5m])", 'rate(http_requests_total{env!="prod"}[5m])'),
    ("sum by (job) (rate(x[5m]))", 'sum by (job)(rate(x{env!="prod"}[5m]))'),
    ("sum(x) without (instance)", 'sum without (instance)(x{env!="prod"})'),
    ("a * on(instance) group_left(team) b", 'a{env!="prod"} * on (instance) group_left (team) b{env!="prod"}'),
    ("a / ignoring(code) group_right c", 'a{env!="prod"} / ignoring (code) group_right () c{env!="prod"}'),
    ("max_over_time(rate(x[5m])[1h:1m])", 'max_over_time(rate(x{env!="prod"}[5m])[1h:1m])'),
    ("x offset 5m", 'x{env!="prod"} offset 5m'),
    ("rate(x[5m] offset 1h)", 'rate(x{env!="prod"}[5m] offset 1h)'),
    ("x @ 1700000000", 'x{env!="prod"} @ 1700000000.000'),
    ("rate(x[5m] @ end())", 'rate(x{env!="prod"}[5m] @ end())'),
    ("histogram_quantile(0.9, sum by (le) (rate(b[5m])))",
     'histogram_quantile(0.9, sum by (le)(rate(b{env!="prod"}[5m])))'),
    ("abs(ceil(delta(x[10m])))", 'abs(ceil(delta(x{env!="prod"}[10m])))'),
    ("topk(3, x)", 'topk(3, x{env!="prod"})'),
    ('count_values("v", x)', 'count_values("v", x{env!="prod"})'),
    ("up or on() vector(1)", 'up{env!="prod"} or on () vector(1)'),
    ("-x > bool 2", '-x{env!="prod"} > bool 2'),
    ("(a + b) * c", '(a{env!="prod"} + b{env!="prod"}) * c{env!="prod"}'),
    ('absent(up{job="db"})', 'absent(up{job="db",env!="prod"})'),
    ('label_replace(up, "env", "staging", "env", "prod")', 'label_replace(up{env!="prod"}, "env", "staging", "env", "prod")'),
    ('up{path=~"/api/.*\\\\.json"}', 'up{path=~"/api/.*\\\\.json",env!="prod"}'),  # the backslash is kept escaped
    ("time() - 60", "time() - 60"),  # no selector, nothing to narrow
]


@pytest.mark.parametrize(("promql", "scoped"), MATRIX, ids=[m[0] for m in MATRIX])
def test_the_matchers_go_into_every_selector(promql: str, scoped: str) -> None:
    assert _flat(scope_query(promql, [NOT_PROD])) == scoped


def test_several_matchers_go_in_together_in_their_order() -> None:
    out = scope_query('rate(x[5m]) / y', [NOT_PROD, 'team=~"web|db"'])
    assert _flat(out) == 'rate(x{env!="prod",team=~"web|db"}[5m]) / y{env!="prod",team=~"web|db"}'
    assert scope_query("up", []) == "up"  # no matchers, nothing changes


def test_a_string_cannot_smuggle_a_selector_past_the_scope() -> None:
    # The label value holds `"} or secret{env="prod"} or up{a="`: printed unescaped, it would become selectors.
    sneaky = r'up{job="x\"} or secret{env=\"prod\"} or up{a=\""}'
    out = scope_query(sneaky, [NOT_PROD])
    assert out == r'up{job="x\"} or secret{env=\"prod\"} or up{a=\"",env!="prod"}'
    assert out.count("env!=") == 1 and " or secret" in out  # one selector still, its value intact


@pytest.mark.parametrize(("promql", "reason"), [
    ("rate(x[5m]", "parse error: unclosed left parenthesis"),
    ("", "parse error: no expression found in input"),
    ("nosuchfunction(x)", "parse error: unknown function"),
    ('x{a="1" or b="2"}', "`or` inside a selector's braces"),
    ("max_over_time(x[1h:])", "explicit step"),
])
def test_what_cannot_be_scoped_is_a_bad_query(promql: str, reason: str) -> None:
    with pytest.raises(MetricsError) as caught:
        scope_query(promql, [NOT_PROD])
    assert caught.value.kind == "bad_query" and reason in caught.value.reason
    assert len(caught.value.reason) < 250


@pytest.mark.parametrize("matcher", ["env", 'env=~"("', 'a="1",b="2"', 'env="a"} or x{b="c"'])
def test_a_matcher_that_is_not_one_label_matcher_is_named(matcher: str) -> None:
    with pytest.raises(MetricsError) as caught:
        scope_query("up", [matcher])
    assert caught.value.kind == "error" and repr(matcher) in caught.value.reason


# --- from the config to the tool ------------------------------------------------------------------------------------

def _grant(*scopes: Scope, roles: tuple[str, ...] = ("viewer",)) -> Grant:
    return Grant(roles=roles, tools=frozenset({"query_metrics"}), scopes=scopes)


def test_the_policy_and_the_fleet_wire_carry_the_matchers() -> None:
    policy = AccessConfig.model_validate({"default_role": "viewer", "roles": {"viewer": {
        "tools": ["*"], "scopes": [{"tags": {"env": "!prod"}, "metric_matchers": [NOT_PROD]}]}}})
    grant = decide(policy, Principal.of("slack", "U3", team="T1"), Place(channel="slack:C1"), ["query_metrics"]).grant
    assert grant is not None and grant.scopes == (Scope(tags={"env": "!prod"}, metric_matchers=(NOT_PROD,)),)
    moved = MovedQuestion(msg=InboundMessage("slack", "1.2", "slack:T1:C1:1.2", "how is db?", CardTarget("slack", "C1"),
                                             ToolContext(user_id="U3", grant=grant)),
                          turn_id="t1", moved_at=1.0, moved_by="replica-a")
    back = moved_from_wire(json.loads(json.dumps(moved_to_wire(moved))))
    assert back.msg.ctx.grant == grant
    # A record from a process that predates metric matchers reads as none, and such a scope is refused below.
    old = json.loads(json.dumps(moved_to_wire(moved)))
    del old["message"]["ctx"]["grant"]["scopes"][0]["metric_matchers"]
    assert moved_from_wire(old).msg.ctx.grant.scopes[0].metric_matchers == ()  # type: ignore[union-attr]
    old["message"]["ctx"]["grant"]["scopes"][0]["metric_matchers"] = "env"
    with pytest.raises(ValueError, match="metric_matchers"):
        moved_from_wire(old)


def test_which_matchers_a_grant_gives() -> None:
    assert grant_matchers(None) == () and grant_matchers(_grant()) == ()
    same = _grant(Scope(provider="aws", metric_matchers=(NOT_PROD,)), Scope(provider="aliyun", metric_matchers=(NOT_PROD,)))
    assert grant_matchers(same) == (NOT_PROD,)
    with pytest.raises(ToolError, match=r"access\.roles\.<role>\.scopes\[\]\.metric_matchers") as caught:
        grant_matchers(_grant(Scope(tags={"env": "!prod"}), roles=("viewer", "web")))
    assert "viewer, web" in str(caught.value) and "resource scopes" in str(caught.value)
    with pytest.raises(ToolError, match="metric_matchers"):
        grant_matchers(_grant(Scope(metric_matchers=(NOT_PROD,)), Scope(provider="aws")))
    with pytest.raises(ToolError, match="differ"):
        grant_matchers(_grant(Scope(metric_matchers=(NOT_PROD,)), Scope(metric_matchers=('team="db"',))))


# --- acceptance on a real Prometheus --------------------------------------------------------------------------------

PROD_VALUES = {'env="prod",instance="db-1"': 700.0, 'env="prod",instance="db-2"': 77.0}
"""Prod series: any sum, count or max that includes one is at least 77."""
OTHER_VALUES = {'env="staging",instance="web-1"': 1.0, 'env="staging",instance="web-2"': 2.0, 'instance="lab"': 3.0}
"""Series the viewer may read (one without an env label: ``env!="prod"`` matches it); all of them add up to 6."""
CEILING = sum(OTHER_VALUES.values())


def _openmetrics(end: int) -> str:
    times = [end - 60 * i for i in range(59, -1, -1)]
    lines = ["# TYPE up gauge"]
    lines += [f"up{{{labels}}} {value} {t}" for labels, value in {**PROD_VALUES, **OTHER_VALUES}.items() for t in times]
    lines += ["# TYPE secret_total counter"]
    lines += [f'secret_total{{env="prod"}} {100 * i} {t}' for i, t in enumerate(times)]
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    end = int(time.time()) // 60 * 60 - 60
    with running_prometheus(tmp_path_factory.mktemp("prometheus-scoping"), _openmetrics(end)) as url:
        yield url


@pytest.fixture
async def query(prometheus_url: str) -> AsyncIterator[Tool]:
    source = PrometheusSource(prometheus_url, timeout_s=10)
    try:
        yield build_metric_tools(source, timeout_s=30)[0]
    finally:
        await source.close()


VIEWER = ToolContext(user_id="U2", platform="cli", grant=_grant(Scope(tags={"env": "!prod"}, metric_matchers=(NOT_PROD,))))
ADMIN = ToolContext(user_id="U1", platform="cli")

ATTEMPTS = [
    "up",
    'up{env="prod"}',
    '{__name__="up"}',
    '{__name__=~".+"}',
    'up{env=~"pro.*"}',
    "up or on() vector(1)",
    "sum(up)",
    "max(up) by (env)",
    'label_replace(up, "env", "staging", "env", "prod")',
    'max_over_time(up{env="prod"}[30m])',
    "max_over_time(up[30m:1m] offset 5m)",
    "secret_total",
    "rate(secret_total[5m]) * 0 + 1",
    "count(up)",
]


def _values(out: Any) -> list[float]:
    return [s["max"] for s in out.data["summaries"] if s["count"]]


@pytest.mark.parametrize("promql", ATTEMPTS)
async def test_a_viewer_scoped_to_not_prod_reads_no_prod_series(query: Tool, promql: str) -> None:
    admin = await query.invoke({"promql": promql, "window": "30m"}, ADMIN)
    viewer = await query.invoke({"promql": promql, "window": "30m"}, VIEWER)
    # The scope changes what the query reads (an unscoped asker reads prod too)...
    assert _values(admin) != _values(viewer), promql
    # ...and gives the scoped viewer nothing that comes from a prod series.
    assert all(v <= CEILING for v in _values(viewer)), (promql, viewer.content)
    assert "700" not in viewer.content and "db-1" not in viewer.content and "db-2" not in viewer.content
    assert viewer.data["query"] == promql  # the model sees its own query; Prometheus ran the scoped one


async def test_the_viewer_still_reads_what_the_scope_allows(query: Tool) -> None:
    out = await query.invoke({"promql": "up", "window": "30m"}, VIEWER)
    assert sorted(s["name"] for s in out.data["summaries"]) == [
        'up{env="staging",instance="web-1"}', 'up{env="staging",instance="web-2"}', 'up{instance="lab"}']
    count = await query.invoke({"promql": "count(up)", "window": "30m"}, VIEWER)
    assert _values(count) == [3.0]
    admin = await query.invoke({"promql": "count(up)", "window": "30m"}, ADMIN)
    assert _values(admin) == [5.0]


async def test_absent_cannot_probe_for_prod_series(query: Tool) -> None:
    admin = await query.invoke({"promql": 'absent(up{env="prod"})', "window": "30m"}, ADMIN)
    viewer = await query.invoke({"promql": 'absent(up{env="prod"})', "window": "30m"}, VIEWER)
    assert admin.data["summaries"] == []  # prod series exist...
    assert _values(viewer) == [1.0]  # ...and to the viewer they look absent, as everything outside the scope


async def test_a_smuggling_string_reads_nothing_of_prod(query: Tool) -> None:
    sneaky = r'up{instance="x\"} or up{env=\"prod\"} or up{a=\""}'
    admin = await query.invoke({"promql": 'up{instance="x"} or up{env="prod"}', "window": "30m"}, ADMIN)
    assert max(_values(admin)) == 700  # what the string would read if it were spliced into the query text
    viewer = await query.invoke({"promql": sneaky, "window": "30m"}, VIEWER)
    assert viewer.data["summaries"] == []


async def test_scopes_without_matchers_or_with_different_ones_are_refused(query: Tool) -> None:
    bare = ToolContext(user_id="U3", grant=_grant(Scope(tags={"env": "!prod"})))
    with pytest.raises(ToolError, match=r"scopes\[\]\.metric_matchers"):
        await query.invoke({"promql": "up"}, bare)
    mixed = ToolContext(user_id="U4", grant=_grant(Scope(metric_matchers=(NOT_PROD,)), Scope(metric_matchers=('env="dev"',))))
    with pytest.raises(ToolError, match="differ"):
        await query.invoke({"promql": "up"}, mixed)
    with pytest.raises(ToolError, match="The query was not run: parse error"):
        await query.invoke({"promql": "rate(up[5m]"}, VIEWER)
