"""An alert card's life through real ``botgateway run`` processes: the real Alertmanager, restarts, replicas,
follow-ups, refusals, audit.

Each test runs the gateway as a process (as ``test_alert_cards`` does) with
Slack on the fake Slack, DingTalk on the fake DingTalk and the scripted model
served by the test: an investigation's first round looks the alert's host up
with ``find_server``, its second answers :data:`FINDINGS`; any other question
is answered by echoing it. The model's requests are what the tests read to
know which tools were offered and what context a turn had. The first test has
the real Alertmanager (Debian's ``prometheus-alertmanager``) group the alerts
and call the gateway, and a host that joins the group (``10.0.2.11``) named on
each card by the card's own lookup; the others post its recorded payloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from botgateway.stores.sqlite import SqliteStore
from tests.alerts.test_alert_cards import CHANNEL, GROUP, SPACE, TOKEN, payload, post, until
from tests.cli.gateway_process import GatewayProcess, free_port, gateway_config, start_gateway
from tests.fakes.alertmanager import Alertmanager, require_alertmanager, timestamp
from tests.fakes.dingtalk import FakeCard, FakeDingTalk, bot_message
from tests.fakes.slack import FakeSlack, Message
from tests.fleet.harness import Replica, dingtalk_section, fleet_config, slack_section, start_replica
from tests.paths import FAKES, REPO, SAMPLE_INVENTORY
from tools.demo.script import Pause, Script, finish_chunk, role_chunk, text_chunks
from tools.demo.server import ScriptedLLMServer

pytestmark = pytest.mark.timeout(120)

FINDINGS = "10.0.1.100 is prod-db-01 of team dba, running in idc-shanghai; nothing else shares it."
"""The investigation's answer."""

ASKED = "An alert is firing"
"""How an investigation's question starts (``alert_q_firing``, en)."""

HOST_LOOKUP = "find_server"
"""The read-only inventory tool the investigation calls."""

ONCALL_SLACK = "UONCALL"
ONCALL_STAFF = "staffoncall"
ROUTE = "critical"


# --- the scripted model ----------------------------------------------------------------------------------


def _text(message: dict[str, Any]) -> str:
    """A chat message's text, whether its content is a string or parts."""
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def respond(body: dict[str, Any]) -> Script:
    """An investigation looks the host up, then answers :data:`FINDINGS`; any other question is echoed."""
    last = body["messages"][-1]
    if last.get("role") == "tool":
        return Script.text(FINDINGS, chunk_size=24)
    question = _text(last)
    if question.startswith(ASKED):
        return Script.tool_calls([("call_lookup", HOST_LOOKUP, {"query": "10.0.1.100"})])
    return Script.text(f"Answered: {question[:80]}", chunk_size=24)


def question_of(request: dict[str, Any]) -> str:
    """The user text a model request ends with (empty for a round after a tool result)."""
    last = request["messages"][-1]
    return _text(last) if last.get("role") == "user" else ""


def offered(request: dict[str, Any]) -> set[str]:
    """Names of the tools a model request offered."""
    return {t["function"]["name"] for t in request.get("tools") or []}


def investigations(llm: ScriptedLLMServer) -> list[dict[str, Any]]:
    """The first request of each investigation."""
    return [r for r in llm.requests if question_of(r).startswith(ASKED)]


# --- what the platforms show -------------------------------------------------------------------------------


def slack_cards(slack: FakeSlack, channel: str = CHANNEL) -> list[Message]:
    """The top-level messages of ``channel`` (alert cards)."""
    return [m for m in slack.channel_messages(channel) if m.thread_ts is None]


def shown(message: Message) -> str:
    """Everything a Slack card shows (its markdown blocks)."""
    return "\n".join(str(b.get("text", "")) for b in message.blocks if b.get("type") == "markdown") or message.text


def the_slack_card(slack: FakeSlack) -> str:
    """What the one alert card shows (or how many cards there are instead)."""
    cards = slack_cards(slack)
    return shown(cards[0]) if len(cards) == 1 else f"{len(cards)} cards"


def slack_final(slack: FakeSlack, *needles: str) -> bool:
    """The one alert card shows ``needles`` and has no stop button (nothing runs on it)."""
    cards = slack_cards(slack)
    return len(cards) == 1 and not cards[0].buttons() and all(n in shown(cards[0]) for n in needles)


def dingtalk_card(dingtalk: FakeDingTalk) -> FakeCard | None:
    """The first card in the alerts group (the alert card)."""
    cards = dingtalk.cards_in(SPACE)
    return cards[0] if cards else None


def dingtalk_final(dingtalk: FakeDingTalk, *needles: str) -> bool:
    """The one alert card was finalized (its investigation ended) and shows ``needles``."""
    cards = dingtalk.cards_in(SPACE)
    return len(cards) == 1 and cards[0].finalized and all(n in cards[0].content for n in needles)


def dingtalk_text(dingtalk: FakeDingTalk) -> str:
    """What the alert card in the alerts group shows."""
    card = dingtalk_card(dingtalk)
    return card.content if card is not None else ""


def first_line(text: str) -> str:
    """A card's headline (its status)."""
    return text.split("\n", 1)[0]


def other_group(*, group_key: str, alertname: str, instance: str) -> bytes:
    """``firing.json`` moved to another alert group: another ``groupKey``, alert name, instance and fingerprint."""
    body = json.loads(payload("firing"))
    body["groupKey"] = group_key
    body["groupLabels"] = {"alertname": alertname}
    body["commonLabels"].update(alertname=alertname, instance=instance)
    body["commonAnnotations"] = {"summary": f"{alertname} on {instance}"}
    for n, item in enumerate(body["alerts"]):
        item["labels"].update(alertname=alertname, instance=instance)
        item["annotations"] = {"summary": f"{alertname} on {instance}"}
        item["fingerprint"] = f"d15cf011{n:08x}"
    return json.dumps(body).encode()


# --- processes --------------------------------------------------------------------------------------------


def route(*, to: list[str], investigate: bool = True, role: str = "oncall") -> dict[str, Any]:
    """The route :data:`ROUTE` of critical alerts to ``to``."""
    return {"name": ROUTE, "match": {"severity": "critical"}, "to": to, "investigate": investigate, "role": role}


def access(roles: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Only on-call people (and the routes' roles) may ask; everyone else is refused."""
    base = {"oncall": {"members": [f"slack:{ONCALL_SLACK}", f"dingtalk:{ONCALL_STAFF}"], "tools": ["*"]}}
    return {"roles": {**base, **(roles or {})}, "default_role": "none"}


def config_for(tmp_path: Path, llm: ScriptedLLMServer, slack: FakeSlack, routes: list[dict[str, Any]], *,
               dingtalk: dict[str, Any] | None = None, roles: dict[str, dict[str, Any]] | None = None,
               tools: dict[str, Any] | None = None) -> dict[str, Any]:
    """A gateway on SQLite in ``tmp_path``: Slack on ``slack`` (Socket Mode), ``dingtalk`` when given, the scripted
    model, the sample inventory, the alerts token and ``routes``."""
    config = gateway_config(
        tmp_path, llm_url=llm.base_url, fake=slack, http_port=free_port(),
        llm={"max_rounds": 4},
        tools={"inventory": {"enabled": True, "path": str(SAMPLE_INVENTORY)}, **(tools or {})},
        access=access(roles),
        alerts={"token": TOKEN, "routes": routes},
    )
    if dingtalk is not None:
        config["adapters"]["dingtalk"] = dingtalk
    return config


@dataclass
class Services:
    """The fakes one test's gateways talk to."""

    slack: FakeSlack
    """The fake Slack (Socket Mode, or Events over HTTP for replicas)."""
    dingtalk: FakeDingTalk
    """The fake DingTalk (Stream mode, card and robot APIs)."""
    llm: ScriptedLLMServer
    """The scripted model, answering with :func:`respond`."""


@pytest.fixture
async def services() -> AsyncIterator[Services]:
    async with FakeSlack() as slack, FakeDingTalk() as dingtalk, ScriptedLLMServer(responder=respond) as llm:
        yield Services(slack, dingtalk, llm)


@contextlib.asynccontextmanager
async def running(tmp_path: Path, config: dict[str, Any]) -> AsyncIterator[GatewayProcess]:
    """A gateway on ``config``, ready; killed afterwards if the test left it running."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    process = await start_gateway(tmp_path, config)
    try:
        await process.wait_readyz(200)
        yield process
    finally:
        await process.kill()


async def stopped(process: GatewayProcess) -> None:
    """SIGTERM, and a clean exit (everything written behind is in the Store)."""
    process.signal(signal.SIGTERM)
    assert await process.wait(60) == 0, process.output()[-3000:]


async def accepted(target: GatewayProcess | Replica, body: bytes) -> None:
    """Post ``body`` as Alertmanager does; it must be accepted for delivery."""
    status, answer = await post(target, body)  # type: ignore[arg-type]  # both have probe_url
    assert status == 200 and answer["deliveries"] >= 1, answer


async def logged(process: GatewayProcess, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30) -> None:
    """Wait for a log line of ``process`` matching ``predicate`` (the only sign of a change nobody sees)."""

    async def poll() -> None:
        while not any(predicate(line) for line in process.log_lines()):
            await asyncio.sleep(0.05)  # paces the reading of the log file; the condition is the line itself

    try:
        await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise AssertionError(f"no such log line; the log ends:\n{process.output()[-3000:]}") from None


async def audit(config_path: Path, *args: str) -> list[dict[str, Any]]:
    """``botgateway audit --format jsonl`` on a stopped gateway's config: its rows."""
    command = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "botgateway.cli", "audit", "-c", str(config_path), "--format", "jsonl", *args,
        cwd=config_path.parent, env={"PYTHONPATH": str(REPO)}, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(command.communicate(), 60)
    assert command.returncode == 0, err.decode(errors="replace")
    return [json.loads(line) for line in out.decode().splitlines() if line.strip()]


def no_crash(process: GatewayProcess) -> None:
    """Nothing failed loudly: no traceback, no failed delivery."""
    assert "Traceback" not in process.output()
    assert not [line for line in process.log_lines() if line.get("event") == "alerts.delivery_failed"]


# --- with the real Alertmanager -----------------------------------------------------------------------------

INVESTIGATING = "Investigating"
"""What the alert's section says while its investigation runs (``alert_investigating``, en); the section's heading
is "Investigation"."""

SOURCES = "sources: static inventory"
"""The footer's sources line of an investigation that looked its host up in the inventory."""

JOINED_HOST = "10.0.2.11 → **prod-web-01** (server · static inventory · team web-team)"
"""How a card names the host that joined the group (``prod-web-01`` in the sample inventory), under its alert."""

FIRST_HOST = "10.0.1.100 → **prod-db-01** (server · static inventory · team dba-team)"
"""How a card names the first alert's host, whether or not an investigation identified it too."""


def host_down(instance: str, *, starts_at: str, ends_at: str | None = None) -> dict[str, Any]:
    """A ``HostDown`` alert on ``instance`` as Prometheus sends it to Alertmanager (``ends_at``: resolved then)."""
    alert: dict[str, Any] = {
        "labels": {"alertname": "HostDown", "severity": "critical", "env": "prod", "job": "node", "instance": instance},
        "annotations": {"summary": f"Host {instance} is down"},
        "startsAt": starts_at,
        "generatorURL": "http://prometheus.example.com:9090/graph?g0.expr=up+%3D%3D+0",
    }
    if ends_at is not None:
        alert["endsAt"] = ends_at
    return alert


def footer_line(text: str) -> str:
    """The line of a card that carries its footer (the one naming its sources); empty when there is none."""
    return next((line for line in text.splitlines() if SOURCES in line), "")


async def investigated(process: GatewayProcess, destination: str) -> None:
    """Wait until the investigation into ``destination``'s card has ended and its outcome is recorded."""
    await logged(process, lambda line: line.get("event") == "alerts.investigated"
                 and str(line.get("key", "")).startswith(f"alertcard:{destination}:"))


async def test_with_the_real_alertmanager_a_finished_card_keeps_its_footer_and_names_the_host_that_joined(
    tmp_path: Path, services: Services,
) -> None:
    require_alertmanager()
    slack, dingtalk, llm = services.slack, services.dingtalk, services.llm
    destinations = [f"slack:{CHANNEL}", f"dingtalk:{GROUP}"]
    config = config_for(tmp_path, llm, slack, [route(to=destinations)], dingtalk=dingtalk_section(dingtalk))
    config["card"] = {**config["card"], "footer": True}  # round, time and model beside the sources line
    started = timestamp()
    first, second = "10.0.1.100:9100", "10.0.2.11:9100"

    def cards() -> dict[str, str]:
        return {"slack": the_slack_card(slack), "dingtalk": dingtalk_text(dingtalk)}

    async with running(tmp_path / "gateway", config) as process, Alertmanager(
        tmp_path / "alertmanager", webhook_url=f"{process.probe_url}/alerts/alertmanager", token=TOKEN,
    ) as alertmanager:
        await alertmanager.post_alerts([host_down(first, starts_at=started)])
        await until(slack, lambda: slack_final(slack, FINDINGS), lambda: the_slack_card(slack), 60)
        await until(dingtalk, lambda: dingtalk_final(dingtalk, FINDINGS), lambda: dingtalk_text(dingtalk), 60)
        for destination in destinations:
            await investigated(process, destination)
        # Nothing was notified since the first notification (repeat_interval: 1 h): this is how the cards settled.
        settled = cards()

        # A second host goes down: Alertmanager sends the group again, and each card is drawn anew from its record.
        await alertmanager.post_alerts([host_down(first, starts_at=started), host_down(second, starts_at=started)])
        await until(slack, lambda: "10.0.2.11" in the_slack_card(slack), lambda: the_slack_card(slack), 30)
        await until(dingtalk, lambda: "10.0.2.11" in dingtalk_text(dingtalk), lambda: dingtalk_text(dingtalk), 30)
        # Then the host that joined is looked up, and named on each card once the lookup lands.
        await until(slack, lambda: JOINED_HOST in the_slack_card(slack), lambda: the_slack_card(slack), 30)
        await until(dingtalk, lambda: JOINED_HOST in dingtalk_text(dingtalk), lambda: dingtalk_text(dingtalk), 30)
        joined = cards()

        # Both recover: the resolved notification draws them once more.
        ended = timestamp()
        await alertmanager.post_alerts([host_down(host, starts_at=started, ends_at=ended) for host in (first, second)])
        await until(slack, lambda: "✅" in first_line(the_slack_card(slack)), lambda: the_slack_card(slack), 30)
        await until(dingtalk, lambda: "✅" in first_line(dingtalk_text(dingtalk)), lambda: dingtalk_text(dingtalk), 30)
        resolved = cards()
        await stopped(process)
        no_crash(process)
        failed = alertmanager.failed_notifications()
    lookups = [r for r in await audit(tmp_path / "gateway" / "config.yaml", "--user", f"alerts:{ROUTE}")
               if r["tool"] == "find_resource"]

    for name, text in settled.items():
        # The investigation's final was drawn once its end was on record: finished, with its footer and sources.
        assert INVESTIGATING not in text and FINDINGS in text and "🔥" in first_line(text), text
        assert footer_line(text) and "round" in footer_line(text), text
        for later in (joined[name], resolved[name]):
            assert INVESTIGATING not in later and FINDINGS in later, later
            assert footer_line(text) in later, later  # the redraw keeps the footer, as the final drew it
    assert "10.0.2.11" in joined["slack"] and "🔥" in first_line(joined["slack"])
    for name, text in joined.items():
        # Each host right under its alert's line: the one that joined, and the first one (the investigation's too).
        lines = text.splitlines()
        for host, named in (("10.0.2.11:9100", JOINED_HOST), ("10.0.1.100:9100", FIRST_HOST)):
            at = next(i for i, line in enumerate(lines) if f"instance={host}" in line)
            assert named in lines[at + 1], (name, text)
        assert JOINED_HOST in resolved[name] and FIRST_HOST in resolved[name], resolved[name]
    # DingTalk shows a finalized card's change: it came as the card's data (PUT /v1.0/card/instances), the way an
    # ended stream takes one, and no streaming write was refused.
    [card] = dingtalk.cards_in(SPACE)
    changed = [c for c in dingtalk.calls if c.method == "PUT" and c.path == "/v1.0/card/instances"
               and JOINED_HOST in json.dumps(c.body, ensure_ascii=False)]
    assert card.finalized and changed and all(c.status == 200 for c in changed)
    assert not [c for c in dingtalk.calls if c.path == "/v1.0/card/streaming" and c.status != 200]
    # Each card looked its hosts up once, as the route's principal holding its role, where the card is: audited.
    asked = sorted((r["channel"], json.loads(r["arguments"])["query"]) for r in lookups)
    assert asked == sorted((channel, host) for channel in (CHANNEL, GROUP) for host in ("10.0.1.100", "10.0.2.11"))
    assert all(r["outcome"] == "ok" and r["role"] == "oncall" for r in lookups), lookups
    assert not failed, failed  # every webhook call was answered 2xx
    # One card per destination for the group's whole life, investigated once in each, nothing posted twice.
    assert len(slack_cards(slack)) == 1 and len(slack.calls_of("chat.postMessage")) == 1
    assert len(dingtalk.cards_in(SPACE)) == 1
    assert len([c for c in dingtalk.calls if c.path.endswith("/createAndDeliver")]) == 1
    assert len(investigations(llm)) == 2
    for destination in destinations:
        # (Alertmanager may take the two recoveries in two flushes: one alert resolving first is a "changed".)
        changes = [line["change"] for line in process.log_lines()
                   if line.get("event") == "alerts.folded" and line.get("destination") == destination]
        assert changes[:2] == ["new", "joined"] and changes[-1] == "resolved" and "repeat" not in changes, changes


# --- restart ---------------------------------------------------------------------------------------------


async def test_a_card_is_found_again_after_a_restart_and_resolved_in_place(tmp_path: Path, services: Services) -> None:
    slack, dingtalk, llm = services.slack, services.dingtalk, services.llm
    config = config_for(tmp_path, llm, slack, [route(to=[f"slack:{CHANNEL}", f"dingtalk:{GROUP}"])],
                        dingtalk=dingtalk_section(dingtalk))

    async with running(tmp_path / "first", config) as first:
        await accepted(first, payload("firing"))
        await until(slack, lambda: slack_final(slack, FINDINGS), lambda: the_slack_card(slack), 60)
        await until(dingtalk, lambda: dingtalk_final(dingtalk, FINDINGS), lambda: dingtalk_text(dingtalk), 60)
        await stopped(first)
    runs = len(llm.requests)

    config["http"]["port"] = free_port()
    async with running(tmp_path / "second", config) as second:  # the same database, a new process
        await accepted(second, payload("resolved"))
        await until(slack, lambda: "✅" in first_line(the_slack_card(slack)), lambda: the_slack_card(slack), 30)
        await until(dingtalk, lambda: "✅" in first_line(dingtalk_text(dingtalk)), lambda: dingtalk_text(dingtalk), 30)
        await stopped(second)
        no_crash(second)

    # Still one card in each destination, edited in place; the investigation stays on it, and is not run again.
    assert len(slack_cards(slack)) == 1 and len(slack.calls_of("chat.postMessage")) == 1
    assert len(dingtalk.cards_in(SPACE)) == 1
    assert len([c for c in dingtalk.calls if c.path.endswith("/createAndDeliver")]) == 1
    assert FINDINGS in the_slack_card(slack) and FINDINGS in dingtalk_text(dingtalk)
    assert len(llm.requests) == runs and len(investigations(llm)) == 2  # one per destination, before the restart


STILL_LOOKING = "Still looking"
"""What the investigation below says before it stalls."""


def stalling(body: dict[str, Any]) -> Script:
    """An investigation looks the host up, says :data:`STILL_LOOKING` and stalls (its process is killed meanwhile)."""
    if body["messages"][-1].get("role") == "tool":
        return Script(chunks=[role_chunk(), *text_chunks(STILL_LOOKING, 4), Pause(120), finish_chunk("stop")])
    return respond(body)


async def test_a_card_whose_gateway_died_mid_investigation_is_closed_as_interrupted_not_investigating(
    tmp_path: Path,
) -> None:
    async with FakeSlack() as slack, ScriptedLLMServer(responder=stalling) as llm:
        config = config_for(tmp_path, llm, slack, [route(to=[f"slack:{CHANNEL}"])])
        async with running(tmp_path / "first", config) as first:
            await accepted(first, payload("firing"))
            await until(slack, lambda: STILL_LOOKING in the_slack_card(slack), lambda: the_slack_card(slack), 60)
            assert INVESTIGATING in the_slack_card(slack)  # while it runs, the alert's section says so
            await first.kill()  # no drain: the card is left open, as after a crash

        config["http"]["port"] = free_port()
        async with running(tmp_path / "second", config) as second:  # the same database and instance id
            # Start-up recovery closes the card it finds open, with the alert kept above its note.
            await until(slack, lambda: slack_final(slack, "restarted"), lambda: the_slack_card(slack), 30)
            closed = the_slack_card(slack)
            # The next notification draws the card from its record, which says the investigation was interrupted.
            await accepted(second, payload("resolved"))
            await until(slack, lambda: "✅" in first_line(the_slack_card(slack)), lambda: the_slack_card(slack), 30)
            await stopped(second)
            no_crash(second)

    assert "🔥" in first_line(closed) and "HostDown" in closed and INVESTIGATING not in closed, closed
    resolved = the_slack_card(slack)
    assert INVESTIGATING not in resolved and "restarted" in resolved and not slack_cards(slack)[0].buttons(), resolved
    assert len(slack_cards(slack)) == 1 and len(investigations(llm)) == 1


# --- across replicas -----------------------------------------------------------------------------------------


async def test_replicas_sharing_redis_keep_one_card_for_a_group_delivered_to_both(
    tmp_path: Path, services: Services, redis_prefix: str,
) -> None:
    slack, llm = services.slack, services.llm
    overrides = {
        "tools": {"inventory": {"enabled": True, "path": str(SAMPLE_INVENTORY)}},
        "access": access(),
        "alerts": {"token": TOKEN, "routes": [route(to=[f"slack:{CHANNEL}"])]},
    }
    replicas: list[Replica] = []
    try:
        for name in ("replica-a", "replica-b"):
            config = fleet_config(name=name, prefix=redis_prefix, llm_url=llm.base_url, http_port=free_port(),
                                  adapters={"slack": slack_section(slack, free_port())}, overrides=overrides)
            replicas.append(await start_replica(tmp_path, config))
        for replica in replicas:
            await replica.wait_ready()
        a, b = replicas

        # Two Alertmanager replicas deliver the same notification to both gateways at once.
        await asyncio.gather(accepted(a, payload("firing")), accepted(b, payload("firing")))
        await until(slack, lambda: slack_final(slack, FINDINGS), lambda: the_slack_card(slack), 60)
        # The replica that did not post the card resolves it.
        poster = next(r for r in replicas if any(
            line.get("event") == "alerts.folded" and line.get("change") == "new" for line in r.log_lines()))
        await accepted(b if poster is a else a, payload("resolved"))
        await until(slack, lambda: "✅" in first_line(the_slack_card(slack)), lambda: the_slack_card(slack), 30)
        for replica in replicas:
            assert await replica.stop() == 0
    finally:
        for replica in replicas:
            await replica.stop()

    assert len(slack_cards(slack)) == 1 and len(slack.calls_of("chat.postMessage")) == 1
    assert slack_final(slack, FINDINGS, "HostDown")
    assert len(investigations(llm)) == 1  # the group was investigated once, by whichever replica took it first
    # Both deliveries were folded into the one record (one as new, the other as its repeat), then the resolve.
    folded = [line for r in replicas for line in r.log_lines() if line.get("event") == "alerts.folded"]
    assert sorted(line["change"] for line in folded) == ["new", "repeat", "resolved"]


# --- DingTalk without a card template ---------------------------------------------------------------------


async def test_dingtalk_without_a_card_template_posts_a_robot_message_per_change_and_none_for_a_repeat(
    tmp_path: Path, services: Services,
) -> None:
    slack, dingtalk, llm = services.slack, services.dingtalk, services.llm
    robot = {k: v for k, v in dingtalk_section(dingtalk).items() if k != "card_template_id"}
    config = config_for(tmp_path, llm, slack, [route(to=[f"dingtalk:{GROUP}"], investigate=False)], dingtalk=robot)

    def sent() -> list[str]:
        return [m.text for m in dingtalk.messages if m.via == "group" and m.chat == GROUP]

    def listed() -> str:
        return "\n---\n".join(sent())

    async with running(tmp_path, config) as process:
        await accepted(process, payload("firing"))
        await until(dingtalk, lambda: len(sent()) == 1, listed, 30)
        await accepted(process, payload("joined"))
        await until(dingtalk, lambda: len(sent()) == 2, listed, 30)
        await accepted(process, payload("repeat"))
        await logged(process, lambda line: line.get("event") == "alerts.folded" and line.get("change") == "repeat")
        assert len(sent()) == 2  # folded and saved, and nothing posted: a repeat is not news
        await accepted(process, payload("resolved"))
        await until(dingtalk, lambda: any("Resolved" in first_line(m) for m in sent()), listed, 30)
        no_crash(process)

    firing, joined, resolved = sent()
    assert "HostDown" in firing and "10.0.1.100" in firing and "Firing" in firing and "10.0.1.101" not in firing
    assert "10.0.1.101" in joined and "Firing" in joined
    assert "Resolved" in first_line(resolved) and "✅" in first_line(resolved) and "10.0.1.101" in resolved
    assert not dingtalk.cards and len(sent()) == 3 and not llm.requests  # a robot message each, no AI card


# --- read-only tools only ---------------------------------------------------------------------------------------


async def test_an_investigation_is_offered_only_read_only_tools_while_a_member_of_its_role_gets_them_all(
    tmp_path: Path, services: Services,
) -> None:
    slack, llm = services.slack, services.llm
    mcp = {"mcp": [{"name": "ops", "command": sys.executable, "args": [str(FAKES / "mcp_server.py"), "stdio"]}]}
    config = config_for(tmp_path, llm, slack, [route(to=[f"slack:{CHANNEL}"])], tools=mcp)

    async with running(tmp_path, config) as process:
        event = slack.mention("what can you do?", user=ONCALL_SLACK, channel="C1")
        await slack.wait_ack(await slack.push(slack.event_payload(event)))
        await until(slack, lambda: any("Answered" in m.markdown() for m in slack.channel_messages("C1")),
                    lambda: "(no answer)", 30)
        await accepted(process, payload("firing"))
        await until(slack, lambda: slack_final(slack, FINDINGS), lambda: the_slack_card(slack), 60)
        no_crash(process)

    [question] = [r for r in llm.requests if question_of(r) == "what can you do?"]
    [investigation] = investigations(llm)
    everything, read_only = offered(question), offered(investigation)
    # The member of the role is offered the MCP server's writing tools too ...
    assert {"ops__drop_database", "ops__echo", "ops__disk_usage", HOST_LOOKUP} <= everything
    # ... the investigation, running as that same role, only what says it only reads: the inventory's lookups and
    # the one MCP tool annotated read-only.
    assert read_only == {n for n in everything if not n.startswith("ops__")} | {"ops__disk_usage"}
    assert HOST_LOOKUP in read_only


# --- refused investigation, audit ------------------------------------------------------------------------------


SECOND_GROUP = "{}/{severity=\"critical\"}:{alertname=\"DiskFull\"}"


@pytest.fixture
async def capped(tmp_path: Path, services: Services) -> AsyncIterator[tuple[GatewayProcess, Path]]:
    """A gateway whose route's role may start one turn per minute: the first group is investigated, the next not."""
    roles = {"capped": {"members": [], "tools": ["*"], "limits": {"turns_per_minute": 1}}}
    config = config_for(tmp_path, services.llm, services.slack, [route(to=[f"slack:{CHANNEL}"], role="capped")],
                        roles=roles)
    async with running(tmp_path, config) as process:
        yield process, tmp_path / "config.yaml"


async def spend_the_routes_next_minutes(config_path: Path) -> None:
    """Spend :data:`ROUTE`'s one turn of this UTC minute and of the next two, in the running gateway's Store.

    The limit counts turns per fixed UTC minute: a second alert admitted on the other side of a minute's end than
    the first would be let through. With this minute and the next two spent (a counter lives two minutes from its
    first count), the next alert is refused wherever the clock is, for longer than the test may run.
    """
    store = SqliteStore(yaml.safe_load(config_path.read_text())["memory"]["sqlite_path"])
    await store.open()
    try:
        minute = int(time.time() // 60)
        counted = [await store.add_to_counter(f"turns:alerts:{ROUTE}:{m}", 0, 120) for m in range(minute - 2, minute + 1)]
        assert any(counted)  # the first investigation's turn is on one of them: these are the limit's own counters
        for m in range(minute, minute + 3):
            await store.add_to_counter(f"turns:alerts:{ROUTE}:{m}", 1, 120)
    finally:
        await store.close()


async def test_an_investigation_the_routes_limit_refuses_leaves_the_alert_on_its_card_saying_so(
    services: Services, capped: tuple[GatewayProcess, Path],
) -> None:
    slack, llm = services.slack, services.llm
    process, config_path = capped
    await accepted(process, payload("firing"))
    await until(slack, lambda: slack_final(slack, FINDINGS), lambda: the_slack_card(slack), 60)
    await spend_the_routes_next_minutes(config_path)

    await accepted(process, other_group(group_key=SECOND_GROUP, alertname="DiskFull", instance="10.0.1.101:9100"))

    def refused() -> Message | None:
        cards = [m for m in slack_cards(slack) if "DiskFull" in shown(m)]
        return cards[0] if cards and not cards[0].buttons() and "this minute" in shown(cards[0]) else None  # the limit

    await until(slack, lambda: refused() is not None, lambda: "\n---\n".join(shown(m) for m in slack_cards(slack)), 30)
    await stopped(process)
    no_crash(process)

    message = refused()
    assert message is not None
    card = shown(message)
    assert "🔥" in first_line(card) and "10.0.1.101" in card  # the alert itself is shown
    assert "Investigation" in card and "Investigating" not in card and FINDINGS not in card
    assert "The investigation could not run" in card  # said as what it is, not as a note to an asker
    assert len(slack_cards(slack)) == 2 and len(investigations(llm)) == 1
    assert [line for line in process.log_lines() if line.get("event") == "alerts.investigation_refused"]

    rows = await audit(config_path, "--user", f"alerts:{ROUTE}")
    refusals = [r for r in rows if r["turn_outcome"] == "limit:turns_per_minute"]
    assert len(refusals) == 1 and "DiskFull" in refusals[0]["question"] and refusals[0]["tool"] == ""


async def test_an_investigation_is_audited_under_its_routes_principal_with_its_tool_calls(
    services: Services, capped: tuple[GatewayProcess, Path],
) -> None:
    slack = services.slack
    process, config_path = capped
    await accepted(process, payload("firing"))
    await until(slack, lambda: slack_final(slack, FINDINGS), lambda: the_slack_card(slack), 60)
    await stopped(process)

    rows = await audit(config_path)
    assert rows and {r["principal"] for r in rows} == {f"alerts:{ROUTE}"}
    # The investigation's turn, and the card's own lookup of the alert's host (no turn: the route's limit is intact).
    [call] = [r for r in rows if r["question"].startswith(ASKED)]
    assert call["tool"] == HOST_LOOKUP and call["outcome"] == "ok" and "10.0.1.100" in call["arguments"]
    assert call["turn_outcome"] == "done" and call["role"] == "capped" and call["channel"] == CHANNEL
    assert call["question"].startswith(ASKED) and "HostDown" in call["question"]
    [lookup] = [r for r in rows if r is not call]
    assert lookup["tool"] == "find_resource" and lookup["outcome"] == "ok" and "10.0.1.100" in lookup["arguments"]
    assert lookup["role"] == "capped" and lookup["channel"] == CHANNEL and lookup["turn_id"] != call["turn_id"]


# --- follow-up context ------------------------------------------------------------------------------------------


def holds_the_investigation(request: dict[str, Any]) -> bool:
    """Whether a model request's history holds the alert's investigation: its question and its answer."""
    earlier = [_text(m) for m in request["messages"][:-1]]
    return any(text.startswith(ASKED) and "HostDown" in text for text in earlier) and any(
        FINDINGS in text for text in earlier)


async def test_a_reply_to_the_card_continues_the_alerts_conversation_on_slack_and_dingtalk(
    tmp_path: Path, services: Services,
) -> None:
    slack, dingtalk, llm = services.slack, services.dingtalk, services.llm
    config = config_for(tmp_path, llm, slack, [route(to=[f"slack:{CHANNEL}", f"dingtalk:{GROUP}"])],
                        dingtalk=dingtalk_section(dingtalk))

    async with running(tmp_path, config) as process:
        await accepted(process, payload("firing"))
        await until(slack, lambda: slack_final(slack, FINDINGS), lambda: the_slack_card(slack), 60)
        await until(dingtalk, lambda: dingtalk_final(dingtalk, FINDINGS), lambda: dingtalk_text(dingtalk), 60)
        [card] = slack_cards(slack)

        # Slack: a reply in the card's thread, no mention.
        reply = slack.message("who else uses that host?", user=ONCALL_SLACK, channel=CHANNEL, thread_ts=card.ts)
        await slack.wait_ack(await slack.push(slack.event_payload(reply)))
        await until(slack, lambda: any("Answered" in m.markdown() for m in slack.thread(CHANNEL, card.ts)),
                    lambda: "(no answer in the thread)", 30)

        # DingTalk: an @-message quoting the card, which comes as a placeholder and the card's carrierId.
        alert_card = dingtalk_card(dingtalk)
        assert alert_card is not None
        carrier = f"c{list(dingtalk.cards).index(alert_card.out_track_id) + 1}"  # what createAndDeliver answered
        quote = {"msgType": "interactiveCard", "msgId": "msgCard01", "senderId": "$:LWCP_v1:$bot",
                 "content": {"text": "[Interactive Card Message]"}}
        await dingtalk.wait_connected()
        await dingtalk.push_bot_message(bot_message("这台机器还在告警吗？", conversation_id=GROUP, staff_id=ONCALL_STAFF,
                                                    quoted=quote, quoted_key=carrier))
        await until(dingtalk, lambda: any("Answered" in c.content and c.finalized for c in dingtalk.cards_in(SPACE)),
                    lambda: "\n---\n".join(c.content for c in dingtalk.cards_in(SPACE)), 30)
        no_crash(process)

    [on_slack] = [r for r in llm.requests if question_of(r) == "who else uses that host?"]
    [on_dingtalk] = [r for r in llm.requests if question_of(r) == "这台机器还在告警吗？"]
    assert holds_the_investigation(on_slack), [_text(m)[:120] for m in on_slack["messages"]]
    assert holds_the_investigation(on_dingtalk), [_text(m)[:120] for m in on_dingtalk["messages"]]
    assert not any("who else uses that host?" in _text(m) for m in on_dingtalk["messages"])  # its own card's
    # the thread reply was answered in the thread, under the one alert card
    assert len(slack_cards(slack)) == 1
