"""An alert group folded from each notification: a recorded life (new, joined, repeat, resolved) and the rest."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from botgateway.alerts.group import MAX_TRACKED_ALERTS, AlertGroup, fold, group_from_dict, group_ref, group_to_dict
from botgateway.alerts.payload import Notification, parse_notification

PAYLOADS = Path(__file__).parent / "payloads"
T0 = 1714557610.0
"""When the first notification arrives (ten seconds after the alert started)."""


def recorded(name: str) -> Notification:
    return parse_notification((PAYLOADS / f"{name}.json").read_bytes())


def made(group_key: str = "k", status: str = "firing", alerts: list[tuple[str, str]] | None = None) -> Notification:
    """A notification of ``alerts`` (fingerprint, status); the group's status is ``status``."""
    data: dict[str, Any] = {
        "version": "4", "groupKey": group_key, "status": status,
        "alerts": [
            {"status": s, "labels": {"alertname": "Disk", "instance": f"10.0.3.{i}:9100"}, "fingerprint": fp}
            for i, (fp, s) in enumerate(alerts or [("a", "firing")])
        ],
    }
    return parse_notification(json.dumps(data).encode())


def life() -> list[tuple[AlertGroup, str]]:
    """The recorded notifications folded in order, a minute apart."""
    group: AlertGroup | None = None
    steps = []
    for i, name in enumerate(["firing", "joined", "repeat", "resolved"]):
        group, change = fold(group, recorded(name), T0 + 60 * i)
        steps.append((group, change))
    return steps


# --- the recorded life of a group ------------------------------------------------------------


def test_the_recorded_notifications_are_new_joined_repeat_resolved() -> None:
    assert [change for _, change in life()] == ["new", "joined", "repeat", "resolved"]


def test_the_first_notification_starts_the_group() -> None:
    group, _ = life()[0]
    assert group.group_key == '{}/{severity="critical"}:{alertname="HostDown"}'
    assert group.status == "firing"
    assert [a.name for a in group.alerts] == ["HostDown"]
    assert group.alerts[0].labels["instance"] == "10.0.1.100:9100"
    assert (group.first_seen, group.updated_at, group.notifications, group.repeats) == (T0, T0, 1, 0)
    assert group.external_url == "http://alertmanager.example.com:9093"


def test_a_joining_alert_is_added_after_the_first() -> None:
    group, _ = life()[1]
    assert [a.labels["instance"] for a in group.alerts] == ["10.0.1.100:9100", "10.0.1.101:9100"]
    assert [a.status for a in group.firing] == ["firing", "firing"]
    assert (group.first_seen, group.updated_at, group.notifications, group.repeats) == (T0, T0 + 60, 2, 0)
    assert "instance" not in group.common_labels  # the latest notification's common labels


def test_a_repeat_is_counted_not_added() -> None:
    group, _ = life()[2]
    assert len(group.alerts) == 2
    assert (group.notifications, group.repeats, group.updated_at) == (3, 1, T0 + 120)


def test_the_resolved_notification_resolves_every_alert() -> None:
    group, _ = life()[3]
    assert group.status == "resolved"
    assert group.firing == ()
    assert [a.status for a in group.alerts] == ["resolved", "resolved"]
    assert group.alerts[0].ends_at == pytest.approx(1714560000.123456, abs=1e-6)
    assert (group.notifications, group.repeats, group.first_seen) == (4, 1, T0)


# --- the other changes -------------------------------------------------------------------------


def test_a_resolved_group_that_fires_again_is_refired() -> None:
    group, _ = fold(None, made(alerts=[("a", "firing")]), T0)
    group, change = fold(group, made(status="resolved", alerts=[("a", "resolved")]), T0 + 1)
    assert change == "resolved"
    group, change = fold(group, made(alerts=[("a", "firing")]), T0 + 2)
    assert change == "refired"
    assert group.status == "firing" and [a.status for a in group.alerts] == ["firing"]


def test_refired_wins_over_joined() -> None:
    group, _ = fold(None, made(status="resolved", alerts=[("a", "resolved")]), T0)
    _, change = fold(group, made(alerts=[("a", "resolved"), ("b", "firing")]), T0 + 1)
    assert change == "refired"


def test_one_of_two_resolving_while_the_group_fires_is_changed() -> None:
    group, _ = fold(None, made(alerts=[("a", "firing"), ("b", "firing")]), T0)
    group, change = fold(group, made(alerts=[("a", "resolved"), ("b", "firing")]), T0 + 1)
    assert change == "changed"
    assert [a.status for a in group.alerts] == ["resolved", "firing"]
    assert group.repeats == 0


def test_a_new_alert_that_arrives_resolved_is_changed_not_joined() -> None:
    group, _ = fold(None, made(alerts=[("a", "firing")]), T0)
    group, change = fold(group, made(alerts=[("a", "firing"), ("b", "resolved")]), T0 + 1)
    assert change == "changed"
    assert [a.fingerprint for a in group.alerts] == ["a", "b"]


def test_alerts_absent_from_a_notification_are_kept_as_they_were() -> None:
    group, _ = fold(None, made(alerts=[("a", "firing"), ("b", "firing")]), T0)
    group, change = fold(group, made(alerts=[("b", "firing")]), T0 + 1)
    assert change == "repeat"
    assert [(a.fingerprint, a.status) for a in group.alerts] == [("a", "firing"), ("b", "firing")]


def test_an_updated_alert_keeps_its_place_and_takes_the_new_text() -> None:
    group, _ = fold(None, made(alerts=[("a", "firing"), ("b", "firing")]), T0)
    data = {
        "version": "4", "groupKey": "k", "status": "firing",
        "alerts": [{"status": "firing", "labels": {"alertname": "Disk"}, "annotations": {"summary": "now 99%"},
                    "fingerprint": "a"}],
    }
    group, _ = fold(group, parse_notification(json.dumps(data).encode()), T0 + 1)
    assert [a.fingerprint for a in group.alerts] == ["a", "b"]
    assert group.alerts[0].annotations == {"summary": "now 99%"}


def test_one_fingerprint_twice_in_a_notification_is_one_alert() -> None:
    group, _ = fold(None, made(alerts=[("a", "firing"), ("a", "resolved")]), T0)
    assert [(a.fingerprint, a.status) for a in group.alerts] == [("a", "resolved")]


def test_an_alert_without_a_name_is_called_alert() -> None:
    data = {"version": "4", "groupKey": "k", "status": "firing", "alerts": [{"status": "firing", "labels": {"x": "y"}}]}
    group, _ = fold(None, parse_notification(json.dumps(data).encode()), T0)
    assert group.alerts[0].name == "alert"


def test_the_truncated_count_is_the_latest_notifications() -> None:
    data = json.loads((PAYLOADS / "firing.json").read_text(encoding="utf-8"))
    data["truncatedAlerts"] = 7
    group, _ = fold(None, parse_notification(json.dumps(data).encode()), T0)
    assert group.truncated_alerts == 7
    group, _ = fold(group, recorded("joined"), T0 + 1)
    assert group.truncated_alerts == 0


def test_a_group_keeps_at_most_its_bound_dropping_the_oldest_resolved_first() -> None:
    first = [(f"r{i}", "resolved") for i in range(5)] + [(f"f{i}", "firing") for i in range(MAX_TRACKED_ALERTS - 5)]
    group, _ = fold(None, made(alerts=first), T0)
    assert len(group.alerts) == MAX_TRACKED_ALERTS
    group, _ = fold(group, made(alerts=[("new1", "firing"), ("new2", "firing")]), T0 + 1)
    kept = [a.fingerprint for a in group.alerts]
    assert len(kept) == MAX_TRACKED_ALERTS
    assert kept[:3] == ["r2", "r3", "r4"]  # r0 and r1, the oldest resolved, made room
    assert kept[-2:] == ["new1", "new2"]


def test_without_resolved_alerts_the_oldest_firing_make_room() -> None:
    group, _ = fold(None, made(alerts=[(f"f{i}", "firing") for i in range(MAX_TRACKED_ALERTS + 3)]), T0)
    kept = [a.fingerprint for a in group.alerts]
    assert len(kept) == MAX_TRACKED_ALERTS and kept[0] == "f3" and kept[-1] == f"f{MAX_TRACKED_ALERTS + 2}"


# --- kept in the Store ---------------------------------------------------------------------------


def test_a_group_survives_a_round_trip_through_json() -> None:
    for group, _ in life():
        assert group_from_dict(json.loads(json.dumps(group_to_dict(group)))) == group


def test_a_group_read_back_folds_on_as_the_original_would() -> None:
    steps = life()
    group = group_from_dict(json.loads(json.dumps(group_to_dict(steps[2][0]))))
    assert fold(group, recorded("resolved"), T0 + 180) == steps[3]


def test_missing_keys_take_neutral_values() -> None:
    group = group_from_dict({})
    assert (group.group_key, group.status, group.alerts, group.notifications, group.repeats) == ("", "firing", (), 0, 0)
    old = group_to_dict(life()[1][0])
    del old["truncated_alerts"], old["updated_at"]
    del old["alerts"][0]["name"], old["alerts"][1]["ends_at"]
    group = group_from_dict(old)
    assert group.truncated_alerts == 0 and group.updated_at == group.first_seen
    assert group.alerts[0].name == "HostDown" and group.alerts[1].ends_at is None


def test_junk_in_a_stored_group_does_not_break_reading_it() -> None:
    group = group_from_dict({"status": 3, "alerts": ["junk", {"labels": "nope", "starts_at": "soon"}], "repeats": True})
    assert group.status == "firing" and group.repeats == 0
    assert len(group.alerts) == 1 and group.alerts[0].labels == {} and group.alerts[0].starts_at is None


# --- the reference -----------------------------------------------------------------------------


def test_the_reference_is_short_stable_and_distinct() -> None:
    key = '{}/{severity="critical"}:{alertname="HostDown"}'
    assert re.fullmatch(r"A-[0-9A-F]{6}", group_ref(key))
    assert group_ref(key) == group_ref(key)
    assert group_ref(key) != group_ref(key + " ")
