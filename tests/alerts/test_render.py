"""The alert section of a card: what it says in both languages, its links, and values that cannot change its markup."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from botgateway.alerts.group import AlertGroup, fold, group_ref
from botgateway.alerts.known_hosts import KnownHost
from botgateway.alerts.payload import parse_notification
from botgateway.alerts.render import alert_section, format_alert_duration, silence_url
from botgateway.strings import STRINGS

PAYLOADS = Path(__file__).parent / "payloads"
STARTED = 1714557600.0
"""When the recorded HostDown alert started (to the second)."""
SOURCE = "http://prometheus.example.com:9090/graph?g0.expr=up%7Bjob%3D%22node%22%7D+%3D%3D+0&g0.tab=1"
SILENCE = "http://alertmanager.example.com:9093/#/silences/new?filter=%7Balertname%3D%22HostDown%22%7D"
LINK = re.compile(r"\[([^\]]*)\]\(([^)]*)\)")


def folded(*names: str) -> AlertGroup:
    group = None
    for i, name in enumerate(names):
        group, _ = fold(group, parse_notification((PAYLOADS / f"{name}.json").read_bytes()), STARTED + 10 + 60 * i)
    assert group is not None
    return group


def custom(alerts: list[dict[str, Any]], **fields: Any) -> AlertGroup:
    data = {"version": "4", "groupKey": "k", "status": "firing", "alerts": alerts, **fields}
    group, _ = fold(None, parse_notification(json.dumps(data).encode()), STARTED)
    return group


def alert(labels: dict[str, str], annotations: dict[str, str] | None = None, **fields: Any) -> dict[str, Any]:
    return {"status": "firing", "labels": labels, "annotations": annotations or {}, **fields}


# --- what the card says --------------------------------------------------------------------------


def test_a_firing_group_in_english() -> None:
    text = alert_section(folded("firing"), locale="en", now=STARTED + 12 * 60 + 5)
    lines = text.splitlines()
    assert lines[0] == "**🔥 Firing · critical · HostDown**"
    assert group_ref(folded("firing").group_key) in lines[2]
    assert "firing for 12 min" in lines[2]
    assert "- **HostDown** · instance=10.0.1.100:9100 · job=node" in lines
    assert "  Host 10.0.1.100:9100 is down" in lines
    assert any("has not answered a scrape for more than 1 minute" in line for line in lines)
    assert LINK.findall(text) == [("Source", SOURCE), ("Silence", SILENCE)]
    assert "repeated" not in text and "Investigating" not in text


def test_a_joined_group_lists_both_alerts_and_counts_them() -> None:
    text = alert_section(folded("firing", "joined"), locale="en", now=STARTED + 600)
    bullets = [line for line in text.splitlines() if line.startswith("- ")]
    assert [b.split(" · ")[1] for b in bullets] == ["instance=10.0.1.100:9100", "instance=10.0.1.101:9100"]
    assert "2 alerts, 2 firing" in text


def test_a_repeat_is_shown_as_a_count() -> None:
    assert "repeated ×1" in alert_section(folded("firing", "joined", "repeat"), locale="en", now=STARTED + 600)


def test_a_resolved_group_says_how_long_it_lasted_and_marks_each_alert() -> None:
    text = alert_section(folded("firing", "joined", "repeat", "resolved"), locale="en", now=STARTED + 9999)
    assert text.startswith("**✅ Resolved · critical · HostDown**")
    assert "resolved after 40 min" in text  # from the first start to the last end, not to now
    bullets = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(bullets) == 2 and all(b.startswith("- ✅ **HostDown**") and b.endswith(" · resolved") for b in bullets)
    assert "2 alerts" in text and "firing" not in text.lower().replace("firing for", "")


def test_one_resolved_alert_of_a_firing_group_is_marked_alone() -> None:
    group = custom([
        alert({"alertname": "Disk", "instance": "a:1"}),
        {**alert({"alertname": "Disk", "instance": "b:1"}), "status": "resolved"},
    ])
    bullets = [line for line in alert_section(group, locale="en", now=STARTED).splitlines() if line.startswith("- ")]
    assert bullets == ["- **Disk** · instance=a:1", "- ✅ **Disk** · instance=b:1 · resolved"]


def test_the_same_group_in_chinese_uses_no_english_fixed_word() -> None:
    group = folded("firing", "joined", "repeat")
    firing = alert_section(group, locale="zh-CN", now=STARTED + 12 * 60 + 5, investigating=True)
    assert firing.startswith("**🔥 告警中 · critical · HostDown**")
    assert "已持续 12 分钟" in firing and "共 2 条告警，2 条告警中" in firing and "重复 1 次" in firing
    assert [label for label, _ in LINK.findall(firing)] == ["来源", "静默"]
    assert "🔎 正在调查…" in firing
    resolved = alert_section(folded("firing", "resolved"), locale="zh-CN", now=STARTED)
    assert resolved.startswith("**✅ 已恢复 · critical · HostDown**") and "持续 40 分钟后恢复" in resolved
    for word in ("Firing", "Resolved", "firing for", "resolved after", "Source", "Silence", "alerts", "repeated"):
        assert word not in firing + resolved


def test_every_fixed_word_comes_from_the_string_table() -> None:
    text = alert_section(folded("firing", "joined", "repeat"), locale="en", now=STARTED + 600, investigating=True)
    for key in ("alert_firing", "alert_source", "alert_silence", "alert_investigating"):
        assert STRINGS["en"][key] in text


def test_investigating_adds_its_line() -> None:
    assert alert_section(folded("firing"), locale="en", now=STARTED, investigating=True).endswith("🔎 Investigating…")


def test_the_truncated_alerts_are_noted() -> None:
    group = custom([alert({"alertname": "Disk"})], truncatedAlerts=12)
    assert "Alertmanager left out 12 more alert(s)" in alert_section(group, locale="en", now=STARTED)


def test_the_severity_comes_from_the_alerts_when_they_do_not_share_it() -> None:
    group = custom([alert({"alertname": "Disk", "severity": "warning"}), alert({"alertname": "Disk", "x": "1"})])
    assert alert_section(group, locale="en", now=STARTED).startswith("**🔥 Firing · warning · Disk**")
    group = custom([alert({"alertname": "Disk"})])
    assert alert_section(group, locale="en", now=STARTED).startswith("**🔥 Firing · Disk**")


def test_many_names_in_the_headline_are_counted() -> None:
    group = custom([alert({"alertname": f"A{i}"}) for i in range(5)])
    assert alert_section(group, locale="en", now=STARTED).startswith("**🔥 Firing · A0, A1, A2 +2**")


def test_at_most_four_key_labels_in_their_order() -> None:
    labels = {"alertname": "X", "service": "s", "job": "j", "pod": "p", "namespace": "n", "node": "d", "team": "t"}
    bullet = alert_section(custom([alert(labels)]), locale="en", now=STARTED).splitlines()[4]
    assert bullet == "- **X** · node=d · pod=p · namespace=n · job=j"


def test_a_long_group_shows_firing_alerts_first_and_counts_the_rest() -> None:
    alerts = [{**alert({"alertname": "R", "instance": f"r{i}"}), "status": "resolved"} for i in range(5)]
    alerts += [alert({"alertname": "F", "instance": f"f{i}"}) for i in range(12)]
    text = alert_section(custom(alerts), locale="en", now=STARTED)
    bullets = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(bullets) == 10 and all("**F**" in b for b in bullets)
    assert "… and 7 more alert(s)" in text


def test_a_message_annotation_stands_in_for_a_missing_summary() -> None:
    text = alert_section(custom([alert({"alertname": "X"}, {"message": "legacy text"})]), locale="en", now=STARTED)
    assert "  legacy text" in text.splitlines()
    group = custom([alert({"alertname": "X"}, {"summary": "same", "description": " same "})])
    text = alert_section(group, locale="en", now=STARTED)
    assert text.count("same") == 1


@pytest.mark.parametrize(
    ("seconds", "en", "zh"),
    [(42.9, "42 s", "42 秒"), (12 * 60 + 59, "12 min", "12 分钟"), (3 * 3600 + 5 * 60, "3 h 5 min", "3 小时 5 分钟"),
     (2 * 86400 + 4 * 3600 + 59, "2 d 4 h", "2 天 4 小时"), (-5, "0 s", "0 秒")],
)
def test_durations_are_coarse(seconds: float, en: str, zh: str) -> None:
    assert format_alert_duration(seconds, "en") == en
    assert format_alert_duration(seconds, "zh-CN") == zh


def test_firing_time_counts_from_the_earliest_firing_alert() -> None:
    text = alert_section(folded("firing", "joined"), locale="en", now=STARTED + 3 * 3600 + 5)
    assert "firing for 3 h 0 min" in text


# --- untrusted values and links ------------------------------------------------------------------


def test_label_and_annotation_values_cannot_make_links_images_or_mentions() -> None:
    evil = {
        "alertname": "**Boom** [click](http://evil.example/x)",
        "instance": "![img](http://evil.example/i.png)",
        "job": "<!channel> @所有人 `code`",
    }
    annotations = {"summary": "see [here](javascript:alert(1))\nSECOND LINE\x00\u202e", "description": "<@U0ADMIN> _x_"}
    text = alert_section(custom([alert(evil, annotations)]), locale="en", now=STARTED)
    assert LINK.findall(text) == []
    for raw in ("](", "![", "<!", "<@", "`", "**Boom", "@所有人", "\x00", "\u202e", " _x_"):
        assert raw not in text
    assert "SECOND LINE" in text and "\n  SECOND LINE" not in text  # a newline in a value stays on its line
    assert "click" in text and "evil.example" in text  # still readable, just inert


def test_long_values_are_cut() -> None:
    text = alert_section(custom([alert({"alertname": "X", "instance": "i" * 500}, {"summary": "s" * 2000})]),
                         locale="en", now=STARTED)
    assert "instance=" + "i" * 79 + "…" in text and "i" * 80 not in text
    assert "s" * 299 + "…" in text and "s" * 300 not in text
    assert max(len(line) for line in text.splitlines()) < 400


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)", "data:text/html,x", "ftp://host/x", "http://", "//evil.example/x", "http://a b/",
        "http://x/\x07",
    ],
)
def test_only_http_links_are_drawn(url: str) -> None:
    group = custom([alert({"alertname": "X"}, generatorURL=url)], externalURL=url, groupLabels={"alertname": "X"})
    assert LINK.findall(alert_section(group, locale="en", now=STARTED)) == []


def test_a_link_cannot_end_early() -> None:
    group = custom([alert({"alertname": "X"}, generatorURL="https://p.example/graph?q=rate(x[5m])>0")])
    ((_, url),) = LINK.findall(alert_section(group, locale="en", now=STARTED))
    assert url == "https://p.example/graph?q=rate%28x[5m]%29%3E0"


def test_the_first_alert_with_a_usable_source_gives_the_link() -> None:
    group = custom([
        alert({"alertname": "A"}, generatorURL="javascript:x"),
        alert({"alertname": "B"}, generatorURL="https://ok.example/"),
    ])
    assert LINK.findall(alert_section(group, locale="en", now=STARTED)) == [("Source", "https://ok.example/")]


def test_the_silence_link_matches_the_group_labels_as_alertmanagers_ui_reads_them() -> None:
    group = custom(
        [alert({"alertname": "X"})], externalURL="https://am.example/prefix/",
        groupLabels={"instance": "10.0.1.100:9100", "alertname": 'Dis"k\\'},
    )
    url = silence_url(group)
    assert url is not None and url.startswith("https://am.example/prefix/#/silences/new?filter=")
    assert unquote(url.split("filter=", 1)[1]) == '{alertname="Dis\\"k\\\\",instance="10.0.1.100:9100"}'


def test_without_group_labels_the_silence_uses_the_common_ones_and_without_either_there_is_none() -> None:
    group = custom([alert({"alertname": "X"})], externalURL="https://am.example", commonLabels={"alertname": "X"})
    assert silence_url(group) == "https://am.example/#/silences/new?filter=%7Balertname%3D%22X%22%7D"
    assert silence_url(custom([alert({"alertname": "X"})], externalURL="https://am.example")) is None
    assert silence_url(custom([alert({"alertname": "X"})], groupLabels={"alertname": "X"})) is None


# --- what a lookup found its hosts to be ----------------------------------------------------------------------------


def test_an_identified_host_is_named_under_its_alert_in_both_languages_and_the_others_are_not() -> None:
    web = KnownHost(host="10.0.1.101", state="found", name="prod-db-02", kind="server", provider="inventory",
                    team="dba-team")
    failed = KnownHost(host="10.0.1.100", state="failed")
    hosts = {h.host: h for h in (web, failed)}
    en = alert_section(folded("firing", "joined"), locale="en", now=STARTED + 600, hosts=hosts).splitlines()
    zh = alert_section(folded("firing", "joined"), locale="zh-CN", now=STARTED + 600, hosts=hosts).splitlines()

    for lines, named in ((en, "  ↳ 10.0.1.101 → **prod-db-02** (server · static inventory · team dba-team)"),
                         (zh, "  ↳ 10.0.1.101 → **prod-db-02**（server · 静态清单 · 团队 dba-team）")):
        at = next(i for i, line in enumerate(lines) if "instance=10.0.1.101:9100" in line)
        assert lines[at + 1] == named, lines
        first = next(i for i, line in enumerate(lines) if "instance=10.0.1.100:9100" in line)
        assert "→" not in lines[first + 1]  # a failed lookup adds nothing
    assert "→" not in alert_section(folded("firing", "joined"), locale="en", now=STARTED + 600)


def test_what_a_lookup_returned_cannot_change_the_cards_markup() -> None:
    sneaky = KnownHost(host="10.0.1.100", state="found", name="**[click](http://evil.example)** @all",
                       kind="server\n# heading", provider="mcp:x", team="<!channel>")
    text = alert_section(folded("firing"), locale="en", now=STARTED + 60, hosts={sneaky.host: sneaky})
    [line] = [line for line in text.splitlines() if "→" in line]
    assert LINK.findall(line) == [] and "@all" not in line and "<!channel>" not in line and "\n#" not in text
    assert "mcp:x" in line and line.count("**") == 2  # only our own bold around the name
