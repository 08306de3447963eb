"""Which alert routes a notification takes: the first whose ``match`` fits, and more while they say ``continue``.

Matchers are Alertmanager's forms (:mod:`botgateway.matchers`, re-exported
here): ``critical`` (equality), ``=critical``, ``!=critical``,
``=~crit.*|warn`` (an anchored regex) and ``!~…``.
"""

from __future__ import annotations

from collections.abc import Sequence

from botgateway.alerts.payload import Notification
from botgateway.config import AlertRouteConfig
from botgateway.matchers import Matcher, MatchOp, parse_matchers

__all__ = ["MatchOp", "Matcher", "parse_matchers", "routes_for"]


def routes_for(routes: Sequence[AlertRouteConfig], notification: Notification) -> list[AlertRouteConfig]:
    """The routes ``notification`` takes, in order: the first that matches, and more while the matched say ``continue``.

    Matched against the group's labels and the labels all its alerts share, as
    Alertmanager routes a group (not each alert).
    """
    labels = {**notification.common_labels, **notification.group_labels}
    taken: list[AlertRouteConfig] = []
    for route in routes:
        if all(m.matches(labels) for m in parse_matchers(route.match)):
            taken.append(route)
            if not route.continue_:
                break
    return taken
