"""Alerts: Alertmanager's notifications become one card per alert group and destination, for the group's life.

The pure parts live here, one idea per module: the webhook payload
(:mod:`.payload`), which routes a group takes (:mod:`.routing`), the group's
state folded from each notification (:mod:`.group`), the card's alert section
(:mod:`.render`) and the question of the read-only investigation
(:mod:`.question`). The desk that posts and updates the cards builds on them.
"""

from __future__ import annotations

from botgateway.alerts.group import AlertGroup, Change, TrackedAlert, fold, group_from_dict, group_ref, group_to_dict
from botgateway.alerts.payload import Alert, AlertStatus, Notification, PayloadError, parse_notification
from botgateway.alerts.question import investigation_question
from botgateway.alerts.render import alert_section
from botgateway.alerts.routing import Matcher, parse_matchers, routes_for

__all__ = [
    "Alert",
    "AlertGroup",
    "AlertStatus",
    "Change",
    "Matcher",
    "Notification",
    "PayloadError",
    "TrackedAlert",
    "alert_section",
    "fold",
    "group_from_dict",
    "group_ref",
    "group_to_dict",
    "investigation_question",
    "parse_matchers",
    "parse_notification",
    "routes_for",
]
