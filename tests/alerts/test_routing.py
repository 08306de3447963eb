"""Alert routes: Alertmanager's matcher forms, anchored regexes, absent labels, first match and ``continue``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from botgateway.alerts.payload import Notification, parse_notification
from botgateway.alerts.routing import Matcher, parse_matchers, routes_for
from botgateway.config import AlertRouteConfig

PAYLOADS = Path(__file__).parent / "payloads"


def matches(match: dict[str, str], labels: dict[str, str]) -> bool:
    return all(m.matches(labels) for m in parse_matchers(match))


def route(name: str, match: dict[str, str], **more: Any) -> AlertRouteConfig:
    return AlertRouteConfig.model_validate({"name": name, "match": match, "to": ["slack:C0OPS"], **more})


def notification(group_labels: dict[str, str], common_labels: dict[str, str]) -> Notification:
    data = json.loads((PAYLOADS / "joined.json").read_text(encoding="utf-8"))
    data["groupLabels"], data["commonLabels"] = group_labels, common_labels
    return parse_notification(json.dumps(data).encode())


# --- matchers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "op", "value"),
    [
        ("critical", "=", "critical"),
        ("=critical", "=", "critical"),
        ("!=critical", "!=", "critical"),
        ("=~crit.*|warn", "=~", "crit.*|warn"),
        ("!~crit.*", "!~", "crit.*"),
        ("", "=", ""),
        ("==x", "=", "=x"),
    ],
)
def test_each_value_form_is_read(text: str, op: str, value: str) -> None:
    expected = Matcher(label="severity", op=op, value=value)  # type: ignore[arg-type]
    assert parse_matchers({"severity": text}) == (expected,)


def test_equality_is_exact() -> None:
    assert matches({"severity": "critical"}, {"severity": "critical"})
    assert not matches({"severity": "critical"}, {"severity": "critical2"})
    assert not matches({"severity": "critical"}, {"severity": "Critical"})


def test_a_regex_is_anchored_at_both_ends_like_alertmanagers() -> None:
    assert not matches({"severity": "=~crit"}, {"severity": "critical"})
    assert matches({"severity": "=~crit.*"}, {"severity": "critical"})
    assert not matches({"severity": "=~ritical"}, {"severity": "critical"})
    # Alternation is anchored as a whole, not just its first and last branch.
    assert matches({"severity": "=~warn|crit.*"}, {"severity": "warn"})
    assert not matches({"severity": "=~warn|crit.*"}, {"severity": "xwarn"})
    assert not matches({"severity": "=~warn|crit"}, {"severity": "critical"})
    assert not matches({"severity": "=~critical"}, {"severity": "critical\n"})


def test_negations() -> None:
    assert matches({"env": "!=prod"}, {"env": "staging"})
    assert not matches({"env": "!=prod"}, {"env": "prod"})
    assert matches({"env": "!~prod.*"}, {"env": "staging"})
    assert not matches({"env": "!~prod.*"}, {"env": "production"})
    assert matches({"env": "!~prod"}, {"env": "production"})  # anchored: "prod" is not all of "production"


def test_an_absent_label_reads_as_empty() -> None:
    assert matches({"team": ""}, {"severity": "critical"})
    assert not matches({"team": ""}, {"team": "db"})
    assert matches({"team": "!=db"}, {})
    assert matches({"team": "=~|db"}, {})
    assert not matches({"team": "=~.+"}, {})


def test_all_matchers_of_a_route_must_hold() -> None:
    assert matches({"severity": "critical", "env": "=~prod|staging"}, {"severity": "critical", "env": "prod"})
    assert not matches({"severity": "critical", "env": "=~prod|staging"}, {"severity": "critical", "env": "dev"})
    assert matches({}, {"anything": "at all"})


def test_a_bad_regex_is_named() -> None:
    with pytest.raises(ValueError, match=r"severity: '\(crit' is not a valid regular expression"):
        parse_matchers({"severity": "=~(crit"})


def test_an_empty_label_name_is_refused() -> None:
    with pytest.raises(ValueError, match="label name"):
        parse_matchers({" ": "x"})


# --- routes --------------------------------------------------------------------------------------


def test_the_first_matching_route_takes_the_group() -> None:
    routes = [route("db", {"team": "db"}), route("crit", {"severity": "critical"}), route("all", {})]
    n = notification({"alertname": "HostDown"}, {"severity": "critical", "team": "web"})
    assert [r.name for r in routes_for(routes, n)] == ["crit"]


def test_continue_tries_the_later_routes_too() -> None:
    routes = [
        route("crit", {"severity": "critical"}, **{"continue": True}),
        route("db", {"team": "db"}),
        route("rest", {}),
        route("never", {}),
    ]
    n = notification({"alertname": "HostDown"}, {"severity": "critical", "team": "web"})
    assert [r.name for r in routes_for(routes, n)] == ["crit", "rest"]


def test_no_route_matches() -> None:
    n = notification({"alertname": "HostDown"}, {"severity": "warning"})
    assert routes_for([route("crit", {"severity": "critical"})], n) == []


def test_group_labels_count_as_well_as_common_ones() -> None:
    n = notification({"cluster": "east"}, {"severity": "critical"})
    assert [r.name for r in routes_for([route("east", {"cluster": "east", "severity": "critical"})], n)] == ["east"]


def test_a_label_of_only_some_alerts_does_not_route_the_group() -> None:
    # joined.json: the two alerts differ in instance, so the group has no instance label to route by.
    n = notification({"alertname": "HostDown"}, {"severity": "critical"})
    assert routes_for([route("one-host", {"instance": "10.0.1.100:9100"})], n) == []
    assert [r.name for r in routes_for([route("no-instance", {"instance": ""})], n)] == ["no-instance"]
