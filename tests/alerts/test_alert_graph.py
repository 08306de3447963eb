"""An alert card's graph, from a real Prometheus rule through the real Alertmanager to the gateway's webhook.

A loopback exporter serves ``demo_load``, whose value the test sets; Debian's
Prometheus scrapes it every second and evaluates ``demo_load > 0.9``; its
alert goes to Debian's Alertmanager, which calls ``botgateway run``. The
gateway graphs the firing expression from the configured Prometheus: on Slack
the chart lands in the alert card's thread, on DingTalk as an image message
under the card; when the load falls and the group resolves, it is drawn again.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from PIL import Image

from tests.alerts.test_alert_cards import CHANNEL, GROUP, TOKEN
from tests.alerts.test_alert_lifecycle import (
    Services,
    config_for,
    dingtalk_final,
    first_line,
    no_crash,
    route,
    running,
    services,  # noqa: F401 (the fixture)
    slack_cards,
    stopped,
    the_slack_card,
)
from tests.fakes.alertmanager import Alertmanager, RouteTiming, require_alertmanager
from tests.fleet.harness import dingtalk_section
from tests.ports import free_port
from tests.prometheus_process import scraping_prometheus

pytestmark = pytest.mark.timeout(180)

RULES = """
groups:
  - name: demo
    rules:
      - alert: HighLoad
        expr: demo_load > 0.9
        labels: {severity: critical}
        annotations: {summary: "load is high on {{ $labels.instance }}"}
"""


class Exporter:
    """A loopback exporter of one gauge whose value the test sets."""

    def __init__(self) -> None:
        self.value = 1.5
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    async def _metrics(self, request: web.Request) -> web.Response:
        body = f"# TYPE demo_load gauge\ndemo_load{{host=\"prod-db-01\"}} {self.value}\n"
        return web.Response(text=body, content_type="text/plain")

    async def __aenter__(self) -> Exporter:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def exporter() -> AsyncIterator[Exporter]:
    async with Exporter() as running_exporter:
        yield running_exporter


def _chart(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


async def test_a_rule_that_fires_gets_its_graph_on_the_card_and_again_when_it_resolves(
    tmp_path: Path, services: Services, exporter: Exporter,  # noqa: F811 (the fixture)
) -> None:
    require_alertmanager()
    slack, dingtalk, llm = services.slack, services.dingtalk, services.llm
    config = config_for(tmp_path, llm, slack, [route(to=[f"slack:{CHANNEL}", f"dingtalk:{GROUP}"], investigate=False)],
                        dingtalk=dingtalk_section(dingtalk))
    http = config["http"]
    alertmanager = Alertmanager(tmp_path / "alertmanager", token=TOKEN, timing=RouteTiming(group_interval="1s"),
                                webhook_url=f"http://{http['host']}:{http['port']}/alerts/alertmanager")
    with scraping_prometheus(tmp_path / "prometheus", target=f"127.0.0.1:{exporter.port}", rules=RULES,
                             alertmanager=f"127.0.0.1:{alertmanager.port}") as prometheus:
        config["tools"]["prometheus"] = {"enabled": True, "url": prometheus, "timeout_s": 10}
        async with running(tmp_path / "gateway", config) as process, alertmanager:
            await slack.wait_for(lambda: len(slack_cards(slack)) == 1 and len(slack.files.shared) >= 1, timeout=90)
            await dingtalk.wait_for(lambda: len(dingtalk.image_messages()) >= 1, timeout=30)
            card = slack_cards(slack)[0]
            firing = list(slack.files.shared)

            exporter.value = 0.1  # the load falls: the rule stops firing and the group resolves
            await slack.wait_for(lambda: "✅" in first_line(the_slack_card(slack)) and len(slack.files.shared) >= 2,
                                 timeout=90)
            await dingtalk.wait_for(lambda: len(dingtalk.image_messages()) >= 2 and dingtalk_final(dingtalk), timeout=30)
            resolved = list(slack.files.shared)
            await stopped(process)
            no_crash(process)
            failed = alertmanager.failed_notifications()

    assert not failed, failed
    # One graph per state of the group, each in the alert card's own thread, titled with what fired.
    assert len(firing) == 1 and len(resolved) == 2, [f.title for f in resolved]
    assert all(f.channel == CHANNEL and f.thread_ts == card.ts for f in resolved)
    assert "HighLoad (firing): demo_load" in resolved[0].title and "(resolved)" in resolved[1].title
    for shared in resolved:
        image = _chart(shared.data)
        assert image.format == "PNG" and image.size == (800, 400)
        assert len(set(image.convert("RGB").getdata())) > 10  # a drawn plot, not a blank picture
    assert "1.5" in resolved[0].alt_txt  # the figures in words: the series' last value while firing
    # The threshold line of the rule is drawn: the threshold red crosses the plot's width.
    pixels = _chart(resolved[0].data).convert("RGB")
    red = [i % 800 for i, rgb in enumerate(pixels.getdata()) if rgb == (209, 36, 47)]
    assert red and max(red) - min(red) > 400, "no threshold line"
    # DingTalk: each graph an image message in the group, naming a media id the gateway uploaded.
    assert [(m.via, m.chat) for m in dingtalk.image_messages()] == [("group", GROUP), ("group", GROUP)]
    assert all(m.photo_url in dingtalk.media for m in dingtalk.image_messages())
    assert "HighLoad" in the_slack_card(slack)
