"""The ``alerts:`` and ``schedules:`` sections: what they accept, each mistake under its key path, no secret shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from botgateway.config import AlertRouteConfig, AlertsConfig, ConfigError, ScheduleConfig, parse_config
from botgateway.destinations import Destination, parse_destination
from tests.cli.cli_process import run_cli

TOKEN = "am-token-5f3e9a7c1d"
PASSWORD = "am-pass-8b2c4e6f0a"
ROLES = {"oncall": {"members": ["slack:U0ONCALL"], "tools": ["search_*"]}}


def problems_of(data: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, env or {})
    return caught.value.problems


def with_routes(*routes: dict[str, Any], **alerts: Any) -> dict[str, Any]:
    return {"access": {"roles": ROLES}, "alerts": {"token": TOKEN, "routes": list(routes), **alerts}}


def only(problems: list[str]) -> str:
    assert len(problems) == 1, problems
    return problems[0]


# --- what is accepted --------------------------------------------------------------------------


def test_the_issues_example_loads() -> None:
    config = parse_config({
        "access": {"roles": ROLES},
        "alerts": {
            "token": "${ALERTS_TOKEN}",
            "routes": [
                {
                    "match": {"severity": "critical"}, "to": ["slack:C0OPS", "dingtalk:cidXyZ+ab/12=="],
                    "investigate": True, "role": "oncall",
                },
                {"match": {}, "to": ["dingtalk:cidXyZ+ab/12=="]},
            ],
        },
        "schedules": [{
            "name": "stopped-prod", "cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai",
            "to": ["dingtalk:cidXyZ+ab/12=="], "prompt": "List the stopped servers in prod, grouped by account",
            "role": "oncall",
        }],
    }, env={"ALERTS_TOKEN": TOKEN})
    alerts = config.alerts
    assert alerts.enabled and alerts.token is not None and alerts.token.get_secret_value() == TOKEN
    assert [r.name for r in alerts.routes] == ["route-1", "route-2"]  # filled by place, 1-based
    assert alerts.routes[0].investigate and alerts.routes[0].role == "oncall" and not alerts.routes[0].continue_
    assert (alerts.max_body_bytes, alerts.locale, alerts.keep_days) == (2**20, "en", 14.0)
    (schedule,) = config.schedules
    assert (schedule.name, schedule.cron, schedule.timezone, schedule.grace_s, schedule.locale) == (
        "stopped-prod", "0 9 * * 1-5", "Asia/Shanghai", 600.0, "en")


def test_without_routes_nothing_is_needed_and_alerts_are_off() -> None:
    config = parse_config({}, env={})
    assert not config.alerts.enabled and config.schedules == []
    assert AlertsConfig().token is None


def test_continue_is_read_under_its_yaml_name_and_a_given_name_is_kept() -> None:
    data = with_routes({"name": "crit", "to": ["slack:C0OPS"], "continue": True}, {"to": ["slack:C0OPS"]})
    config = parse_config(data)
    assert [(r.name, r.continue_) for r in config.alerts.routes] == [("crit", True), ("route-2", False)]
    assert AlertRouteConfig(to=["slack:C1"], continue_=True).continue_  # code may say continue_


def test_basic_auth_alone_authenticates() -> None:
    auth = {"username": "am", "password": PASSWORD}
    config = parse_config({"alerts": {"basic_auth": auth, "routes": [{"to": ["slack:C0OPS"]}]}})
    assert config.alerts.basic_auth is not None and config.alerts.token is None


def test_an_empty_token_counts_as_unset() -> None:
    message = only(problems_of({"alerts": {"token": "${ALERTS_TOKEN:-}", "routes": [{"to": ["slack:C0OPS"]}]}}))
    assert message.startswith("alerts: set alerts.token (bearer) or alerts.basic_auth")


def test_cron_nicknames_and_weekday_names_are_cron() -> None:
    for cron in ("@daily", "0 9 * * MON-FRI", "*/15 8-18 * * *", "0  9 * *   1-5"):
        schedule = ScheduleConfig(name="r", cron=cron, to=["slack:C1"], prompt="p", role="viewer")
        assert schedule.cron == " ".join(cron.split())


# --- mistakes, each under its path ---------------------------------------------------------------


def test_routes_without_a_secret_are_refused() -> None:
    message = only(problems_of({"alerts": {"routes": [{"to": ["slack:C0OPS"]}]}}))
    assert message.startswith("alerts: set alerts.token (bearer) or alerts.basic_auth")


def test_a_bad_regex_is_named_under_match() -> None:
    message = only(problems_of(with_routes({"match": {"severity": "=~(crit"}, "to": ["slack:C0OPS"]})))
    assert message.startswith("alerts.routes[0].match: severity: '(crit' is not a valid regular expression")


@pytest.mark.parametrize(
    ("destination", "words"),
    [
        ("slack:#ops", "channel id"),
        ("slack:ops", "channel id"),
        ("teams:19abc", "unknown platform 'teams'"),
        ("C0OPS", "use slack:<channel id> or dingtalk:<openConversationId>"),
        ("dingtalk:", "use slack:<channel id> or dingtalk:<openConversationId>"),
        ("dingtalk:cid with space", "openConversationId"),
    ],
)
def test_a_bad_destination_is_named_under_to(destination: str, words: str) -> None:
    message = only(problems_of(with_routes({"to": [destination]})))
    assert message.startswith("alerts.routes[0].to: ") and words in message


def test_a_route_needs_a_destination_and_lists_each_once() -> None:
    assert "is empty; name at least one destination" in only(problems_of(with_routes({"to": []})))
    assert "alerts.routes[0].to: required key is missing" == only(problems_of(with_routes({"match": {}})))
    assert "slack:C0OPS is listed twice" in only(problems_of(with_routes({"to": ["slack:C0OPS", " slack:C0OPS"]})))


def test_an_investigation_needs_a_role() -> None:
    message = only(problems_of(with_routes({"to": ["slack:C0OPS"], "investigate": True})))
    assert message.startswith("alerts.routes[0]: investigate: true needs role")


def test_a_role_must_exist_in_the_policy() -> None:
    message = only(problems_of(with_routes({"to": ["slack:C0OPS"], "investigate": True, "role": "ops"})))
    assert message == (
        "alerts.routes[0].role: not a role under access.roles (known: oncall); define it there (got 'ops')"
    )


def test_without_an_access_section_the_default_policys_roles_count() -> None:
    data = {"alerts": {"token": TOKEN, "routes": [{"to": ["slack:C0OPS"], "investigate": True, "role": "viewer"}]}}
    assert parse_config(data).alerts.routes[0].role == "viewer"
    data["alerts"]["routes"][0]["role"] = "oncall"
    assert "(known: viewer)" in only(problems_of(data))


def test_names_are_unique_among_routes_and_among_schedules() -> None:
    schedule = {"cron": "0 9 * * *", "to": ["slack:C1"], "prompt": "p", "role": "oncall"}
    routes = [{"name": "db", "to": ["slack:C1"]}, {"to": ["slack:C1"]}, {"name": "route-2", "to": ["slack:C1"]}]
    data = with_routes(*routes)
    data["schedules"] = [{"name": "db", **schedule}, {"name": "daily", **schedule}, {"name": "daily", **schedule}]
    assert problems_of(data) == [
        "alerts.routes[2].name: the name is taken by alerts.routes[1]; names must be unique (got 'route-2')",
        "schedules[2].name: the name is taken by schedules[1]; names must be unique (got 'daily')",
    ]


def test_a_destination_on_a_disabled_adapter_is_refused() -> None:
    data = with_routes({"to": ["slack:C0OPS", "dingtalk:cidA=="]})
    data["adapters"] = {"dingtalk": {"enabled": False}}
    data["schedules"] = [{"name": "r", "cron": "0 9 * * *", "to": ["dingtalk:cidA=="], "prompt": "p", "role": "oncall"}]
    problems = problems_of(data)
    assert [p.split(":")[0] for p in problems] == ["alerts.routes[0].to[1]", "schedules[0].to[0]"]
    assert all("adapters.dingtalk is enabled: false" in p for p in problems)
    data["adapters"] = {"dingtalk": {"enabled": "auto"}}
    parse_config(data)  # auto may still start it


def test_a_bad_name_is_refused() -> None:
    message = only(problems_of(with_routes({"name": "on call!", "to": ["slack:C0OPS"]})))
    assert message.startswith("alerts.routes[0].name: a name is 1-64 letters, digits")


def test_bad_limits_are_refused() -> None:
    problems = problems_of(with_routes({"to": ["slack:C0OPS"]}, max_body_bytes=100, keep_days=0, locale="fr"))
    assert [p.split(":")[0] for p in problems] == ["alerts.max_body_bytes", "alerts.locale", "alerts.keep_days"]


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("cron", "0 0 9 * * ?", "has 6 fields; a cron expression has five fields"),
        ("cron", "61 * * * *", "not a valid cron expression (is not acceptable, out of range)"),
        ("cron", "0 9 31 2 *", "never runs"),
        ("cron", "@sometimes", "not a valid cron expression"),
        ("timezone", "Asia/Shangai", "not a known time zone; use an IANA name"),
        ("timezone", "../../etc/passwd", "not a known time zone"),
        ("prompt", "   ", "is empty; write the question"),
        ("role", "", "is empty; name the access role"),
        ("name", "a" * 65, "a name is 1-64 letters"),
        ("grace_s", -1, "greater than or equal to 0"),
    ],
)
def test_schedule_mistakes_are_named(field: str, value: Any, words: str) -> None:
    schedule = {"name": "r", "cron": "0 9 * * 1-5", "to": ["slack:C1"], "prompt": "p", "role": "oncall", field: value}
    message = only(problems_of({"access": {"roles": ROLES}, "schedules": [schedule]}))
    assert message.startswith(f"schedules[0].{field}: ") and words in message


# --- secrets -----------------------------------------------------------------------------------


def test_secrets_never_appear_in_a_message() -> None:
    data = with_routes({"to": ["slack:#ops"], "role": "nope"}, basic_auth={"username": "", "password": PASSWORD})
    data["alerts"]["token"] = 42424242424242
    joined = "\n".join(problems_of(data))
    assert "alerts.token: Input should be a valid string" in joined
    assert "42424242424242" not in joined and PASSWORD not in joined
    data = with_routes({"to": ["slack:C0OPS"], "role": "nope"}, basic_auth={"username": "am", "password": PASSWORD})
    joined = "\n".join(problems_of(data))
    assert "alerts.routes[0].role" in joined and TOKEN not in joined and PASSWORD not in joined
    assert TOKEN not in repr(parse_config(with_routes({"to": ["slack:C0OPS"]})).alerts)


def test_an_empty_basic_auth_password_is_refused() -> None:
    message = only(problems_of({"alerts": {"basic_auth": {"username": "am", "password": ""}}}))
    assert message.startswith("alerts.basic_auth.password: is empty")


# --- destinations --------------------------------------------------------------------------------


def test_a_destination_reads_back_as_written() -> None:
    assert parse_destination(" slack:C0OPS ") == Destination(platform="slack", chat_id="C0OPS")
    assert str(parse_destination("dingtalk:cidXyZ+ab/12==")) == "dingtalk:cidXyZ+ab/12=="


# --- through botgateway check-config -------------------------------------------------------------

GOOD = f"""\
tools:
  inventory: {{enabled: false}}
access:
  roles:
    oncall: {{members: ["slack:U0ONCALL"], tools: ["search_*"]}}
alerts:
  token: {TOKEN}
  routes:
    - match: {{severity: "=~crit.*"}}
      to: ["slack:C0OPS"]
      investigate: true
      role: oncall
      continue: true
    - to: ["dingtalk:cidXyZ=="]
schedules:
  - name: stopped-prod
    cron: "0 9 * * 1-5"
    timezone: Asia/Shanghai
    to: ["dingtalk:cidXyZ=="]
    prompt: List the stopped servers in prod
    role: oncall
"""


def test_check_config_accepts_alerts_and_schedules(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD, encoding="utf-8")
    run = run_cli("check-config", "-c", str(path), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "OK"


def test_check_config_names_each_problem_by_its_key_and_no_secret(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    bad = GOOD.replace("role: oncall\n      continue", "role: ops\n      continue")
    bad = bad.replace("Asia/Shanghai", "Mars/Olympus")
    path.write_text(bad + "adapters:\n  slack: {enabled: false}\n", encoding="utf-8")
    run = run_cli("check-config", "-c", str(path), cwd=tmp_path)
    assert run.returncode == 1
    assert "Traceback" not in run.stderr + run.stdout
    assert "schedules[0].timezone: not a known time zone" in run.stderr
    assert TOKEN not in run.stderr + run.stdout
    # With the zone fixed, the checks across sections speak.
    path.write_text(bad.replace("Mars/Olympus", "UTC") + "adapters:\n  slack: {enabled: false}\n", encoding="utf-8")
    run = run_cli("check-config", "-c", str(path), cwd=tmp_path)
    assert run.returncode == 1
    assert f"{path}: 2 problem(s):" in run.stderr
    assert "  - alerts.routes[0].role: not a role under access.roles (known: oncall)" in run.stderr
    assert "  - alerts.routes[0].to[0]: adapters.slack is enabled: false" in run.stderr
    assert TOKEN not in run.stderr + run.stdout
