"""Alertmanager's webhook body: the recorded notifications read exactly, every malformed body refused in plain words."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from botgateway.alerts.payload import MAX_ALERTS, PayloadError, parse_notification

PAYLOADS = Path(__file__).parent / "payloads"

STARTS_AT = 1714557600.123456
"""2024-05-01T10:00:00.123456789Z: Go's nanoseconds, cut to the microseconds Python keeps."""


def payload(name: str) -> dict[str, Any]:
    return json.loads((PAYLOADS / f"{name}.json").read_text(encoding="utf-8"))


def body(data: Any) -> bytes:
    return json.dumps(data).encode("utf-8")


def refusal(data: Any) -> str:
    with pytest.raises(PayloadError) as caught:
        parse_notification(data if isinstance(data, bytes) else body(data))
    return str(caught.value)


# --- the recorded notifications ---------------------------------------------------------------


def test_a_firing_notification_is_read_field_by_field() -> None:
    n = parse_notification((PAYLOADS / "firing.json").read_bytes())
    assert n.version == "4"
    assert n.group_key == '{}/{severity="critical"}:{alertname="HostDown"}'
    assert n.status == "firing"
    assert n.receiver == "botgateway"
    assert n.group_labels == {"alertname": "HostDown"}
    assert n.common_labels["instance"] == "10.0.1.100:9100"
    assert n.common_annotations["summary"] == "Host 10.0.1.100:9100 is down"
    assert n.external_url == "http://alertmanager.example.com:9093"
    assert n.truncated_alerts == 0
    (alert,) = n.alerts
    assert alert.status == "firing"
    assert alert.labels["severity"] == "critical"
    assert alert.annotations["runbook_url"] == "https://runbooks.example.com/HostDown"
    assert alert.starts_at == pytest.approx(STARTS_AT, abs=1e-6)
    assert alert.ends_at is None  # Go's zero time: not resolved
    assert alert.generator_url.startswith("http://prometheus.example.com:9090/graph?")
    assert alert.fingerprint == "5a6f4b2c3d1e0f98"


def test_a_joined_notification_keeps_the_order_alertmanager_sent() -> None:
    n = parse_notification((PAYLOADS / "joined.json").read_bytes())
    assert [a.labels["instance"] for a in n.alerts] == ["10.0.1.100:9100", "10.0.1.101:9100"]
    assert n.alerts[1].starts_at == pytest.approx(1714557870.5)


def test_a_resolved_notification_has_its_end_times() -> None:
    n = parse_notification((PAYLOADS / "resolved.json").read_bytes())
    assert n.status == "resolved"
    assert [a.status for a in n.alerts] == ["resolved", "resolved"]
    assert n.alerts[0].ends_at == pytest.approx(STARTS_AT + 2400, abs=1e-6)
    assert n.alerts[1].ends_at == pytest.approx(1714559880.0)


def test_times_with_an_offset_and_without_a_fraction_are_read() -> None:
    data = payload("firing")
    data["alerts"][0]["startsAt"] = "2024-05-01T18:00:00+08:00"
    assert parse_notification(body(data)).alerts[0].starts_at == 1714557600.0


def test_what_a_sender_may_leave_out_takes_a_neutral_value() -> None:
    data = {"version": "4", "groupKey": "k", "status": "firing", "alerts": [{"status": "firing", "labels": {"a": "b"}}]}
    n = parse_notification(body(data))
    assert (n.receiver, n.external_url, n.truncated_alerts, dict(n.group_labels)) == ("", "", 0, {})
    alert = n.alerts[0]
    assert (alert.starts_at, alert.ends_at, alert.generator_url, dict(alert.annotations)) == (None, None, "", {})


def test_keys_alertmanager_adds_later_are_ignored() -> None:
    data = payload("firing")
    data["newField"] = {"x": 1}
    data["alerts"][0]["silencedBy"] = ["abc"]
    assert parse_notification(body(data)).alerts[0].fingerprint == "5a6f4b2c3d1e0f98"


def test_a_missing_fingerprint_is_derived_from_the_labels_alone() -> None:
    data = payload("joined")
    for alert in data["alerts"]:
        del alert["fingerprint"]
    first = parse_notification(body(data))
    reordered = copy.deepcopy(data)
    reordered["alerts"][0]["labels"] = dict(reversed(list(data["alerts"][0]["labels"].items())))
    reordered["alerts"][0]["annotations"] = {"summary": "changed text"}
    reordered["alerts"][0]["status"] = "resolved"
    second = parse_notification(body(reordered))
    assert first.alerts[0].fingerprint == second.alerts[0].fingerprint  # the same alert, whatever else changed
    assert first.alerts[0].fingerprint != first.alerts[1].fingerprint  # another instance is another alert
    assert len(first.alerts[0].fingerprint) == 16


# --- refusals ------------------------------------------------------------------------------------


def test_a_body_that_is_not_json_is_refused() -> None:
    assert refusal(b"alertname=HostDown").startswith("not JSON:")
    assert refusal(b"\xff\xfe{}").startswith("not JSON:")


def test_json_that_is_not_an_object_is_refused() -> None:
    assert "expected a JSON object" in refusal([payload("firing")])


def test_grafanas_webhook_version_1_is_read_too() -> None:
    data = payload("firing")
    data.update(version="1", orgId=1, title="[FIRING:1] HostDown", state="alerting", message="…")
    data["alerts"][0].update(silenceURL="http://grafana/alerting/silence/new", values={"B": 1})
    notification = parse_notification(json.dumps(data).encode())
    assert notification.version == "1" and notification.alerts[0].fingerprint == data["alerts"][0]["fingerprint"]


@pytest.mark.parametrize("version", ["2", 4, None])
def test_only_version_4_is_read(version: object) -> None:
    data = payload("firing")
    data["version"] = version
    message = refusal(data)
    assert message.startswith('version: expected "4"')


def test_a_missing_version_is_refused() -> None:
    data = payload("firing")
    del data["version"]
    assert refusal(data).startswith('version: expected "4"')


def test_an_empty_group_key_is_refused() -> None:
    data = payload("firing")
    data["groupKey"] = ""
    assert refusal(data) == "groupKey: must not be empty"


def test_a_wrong_type_deep_inside_is_named_by_its_path() -> None:
    data = payload("joined")
    data["alerts"][1]["labels"] = ["instance", "10.0.1.101:9100"]
    assert refusal(data) == "alerts[1].labels: expected an object"


def test_a_label_value_that_is_not_a_string_is_named() -> None:
    data = payload("firing")
    data["alerts"][0]["labels"]["severity"] = 5
    assert refusal(data) == "alerts[0].labels.severity: expected a string"


def test_an_unknown_status_is_refused_with_the_known_ones() -> None:
    data = payload("firing")
    data["alerts"][0]["status"] = "pending"
    assert refusal(data) == "alerts[0].status: expected 'firing' or 'resolved'"


def test_a_time_that_is_not_rfc3339_is_refused() -> None:
    data = payload("firing")
    data["alerts"][0]["startsAt"] = "yesterday"
    message = refusal(data)
    assert message.startswith("alerts[0].startsAt: expected an RFC 3339 time")
    data["alerts"][0]["startsAt"] = "2024-02-30T10:00:00Z"
    assert "not a real date and time" in refusal(data)


def test_a_notification_without_alerts_is_refused() -> None:
    data = payload("firing")
    data["alerts"] = []
    assert refusal(data) == "alerts: expected at least one alert"
    del data["alerts"]
    assert refusal(data) == "alerts: required but missing"


def test_more_than_the_largest_group_is_refused_before_it_is_read() -> None:
    data = payload("firing")
    data["alerts"] = [{"status": "nonsense"}] * (MAX_ALERTS + 1)
    message = refusal(data)
    assert message.startswith(f"alerts: {MAX_ALERTS + 1} alerts, more than {MAX_ALERTS}")
    assert "max_alerts" in message


def test_the_largest_group_is_read() -> None:
    data = payload("firing")
    template = data["alerts"][0]
    data["alerts"] = [{**template, "fingerprint": f"{i:016x}"} for i in range(MAX_ALERTS)]
    assert len(parse_notification(body(data)).alerts) == MAX_ALERTS


def test_many_problems_name_the_first_three_and_count_the_rest() -> None:
    data = payload("firing")
    data["alerts"] = [{"status": "firing", "labels": None}] * 5
    message = refusal(data)
    assert message.count("expected an object") == 3
    assert message.endswith("(and 2 more)")


def test_a_negative_truncated_count_is_refused() -> None:
    data = payload("firing")
    data["truncatedAlerts"] = -1
    assert refusal(data) == "truncatedAlerts: must be 0 or more"


def test_control_characters_of_the_body_never_reach_the_message() -> None:
    data = payload("firing")
    data["alerts"][0]["labels"] = {"evil\x1b[31m\nkey" + "x" * 200: 1}
    message = refusal(data)
    assert "\x1b" not in message and "\n" not in message
    assert len(message) < 120


def test_the_error_is_a_value_error() -> None:
    assert issubclass(PayloadError, ValueError)
