"""The estate tools end to end on the fake Slack: a question about each kind, a trace, scopes and the audit.

Real slack-bolt / slack-sdk against the fake Slack, the real gateway, tool loop
and card streamer, the estate tools built as ``botgateway run`` builds them
(on the sample estate, on loopback fakes of Tencent Cloud and Alibaba Cloud
through their official SDKs, and on a fake Kubernetes API server through the
official client). The scripted model calls the estate tools, then answers with
what they returned; assertions are on the card Slack shows (its status line
per tool call, the answer), on what the model was sent, on the requests each
fake recorded and on the audit trail.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import pytest

from botgateway.config import InventoryConfig, KubeContextConfig, KubernetesConfig, ToolsConfig
from tests.estate_fixtures import (
    ESTATE_TOOLSETS,
    TRACE_CHAIN,
    audit_of,
    cloud_account,
    cloud_section,
    estate_toolset,
    sample_estate_config,
    tool_results,
    tools_then_answer,
)
from tests.fakes.aliyun_estate import FakeAliyunEstate
from tests.fakes.kube_api import FakeKubeApi, shop_cluster, write_kubeconfig
from tests.fakes.slack_env import Env, replies, slack_env
from tests.fakes.tencent_estate import REGION as GUANGZHOU
from tests.fakes.tencent_estate import FakeTencentEstate
from tools.demo.script import ToolCallSpec

LEAD = "Here is what the estate says."
"""The first line of every scripted answer; the tool results follow it verbatim."""



def status_lines(markdown: str) -> list[str]:
    """The card's status lines: one per finished tool call (``✅ name · 0.1 s · summary``)."""
    return [line for line in markdown.splitlines() if line.startswith(("✅ ", "❌ "))]


def done_line(markdown: str, tool: str, summary: str) -> str:
    """The card's one status line of ``tool`` finished with ``summary`` (fails when it is not exactly one)."""
    pattern = re.compile(rf"✅ {re.escape(tool)} · [^·]+ · {re.escape(summary)}")
    found = [line for line in status_lines(markdown) if pattern.fullmatch(line)]
    assert len(found) == 1, f"no single status line '{tool} · {summary}' in:\n{markdown}"
    return found[0]


def answer_part(card: str) -> str:
    """The model's answer on the card: from its lead line to the footer (status lines above it, the footer below)."""
    assert LEAD in card, card
    start = card.index(LEAD)
    footer = card.rfind("\n\n_sources:")
    return card[start:footer] if footer > start else card[start:]


@asynccontextmanager
async def on_slack(tmp_path: Path, config: ToolsConfig, calls: Sequence[ToolCallSpec], **options: Any
                   ) -> AsyncIterator[Env]:
    """The fake Slack and a gateway offering the estate tools of ``config``; the model makes ``calls``, then answers.

    Everything is closed on the way out, a failed assertion included.
    """
    async with estate_toolset(config) as toolset:
        envs = cast(AsyncGenerator[Env, None],
                    slack_env(tmp_path, tools=toolset.tools, responder=tools_then_answer(calls, LEAD), **options))
        try:
            yield await anext(envs)
        finally:
            await envs.aclose()


async def ask(env: Env, question: str, *, user: str = "U1") -> tuple[str, str]:
    """Ask ``question`` as ``user`` in C1; returns the final card's Markdown and the turn id once it is final."""
    event = env.fake.mention(question, channel="C1", user=user)
    outcome = await env.done(await env.push(event))
    assert outcome.outcome == "done", outcome
    [reply] = replies(env, "C1", event["ts"])
    assert not reply.streaming
    return reply.markdown(), outcome.turn_id


# --- a question about each kind ------------------------------------------------------------------------------


SAMPLE_KINDS = [
    # (kind, the call, its summary on the card, what the answer must name)
    ("database", {"query": "orders-db"}, "1 database found: orders-db",
     "database orders-db [rds-orders-01] | Static inventory on-prem/idc-shanghai | running | mysql 8.0 port 3306"),
    ("cache", {"query": "orders-redis"}, "1 cache found: orders-redis",
     "cache orders-redis [redis-orders-01] | Static inventory on-prem/idc-shanghai | running | redis 7.0 port 6379"),
    ("load balancer", {"query": "api-lb", "kind": "load_balancer"}, "1 load balancer found: api-lb",
     "listeners https:443 → 2 backends (1 unhealthy); http:80 → 2 backends (1 unhealthy)"),
    ("security group", {"query": "sg-web", "kind": "security_group"}, "1 security group found: web-servers",
     "OPEN TO THE INTERNET: allow tcp 22 from 0.0.0.0/0"),
    ("ip", {"query": "203.0.113.20", "kind": "ip"}, "1 elastic IP found: 203.0.113.20",
     "elastic IP 203.0.113.20 [eip-api-lb] | Static inventory on-prem/idc-shanghai | in-use"),
    ("nat gateway", {"query": "nat-shanghai-01"}, "1 NAT gateway found: prod-egress",
     "NAT gateway prod-egress [nat-shanghai-01]"),
    ("dns record", {"query": "shop.example.com", "kind": "dns_record"}, "1 DNS record found: shop.example.com",
     "DNS record shop.example.com [shop.example.com A] | Static inventory on-prem | A → 203.0.113.40 ttl 300"),
    ("bucket", {"query": "shop-assets"}, "1 bucket found: shop-assets",
     "bucket shop-assets | Static inventory on-prem/idc-shanghai | PUBLIC acl public-read"),
    ("pod", {"query": "checkout-7d9f8-fghij"}, "1 pod found: checkout-7d9f8-fghij",
     "pod checkout-7d9f8-fghij [shop/checkout-7d9f8-fghij] | Static inventory prod-k8s/shop | crashloopbackoff"),
    ("workload", {"query": "checkout", "kind": "workload"}, "1 workload found: checkout",
     "workload checkout [shop/checkout] | Static inventory prod-k8s/shop | degraded | type Deployment replicas 2/3"),
    ("kubernetes service", {"query": "checkout", "kind": "k8s_service"}, "1 Kubernetes service found: checkout",
     "Kubernetes service checkout [shop/checkout] | Static inventory prod-k8s/shop | active | type ClusterIP"),
    ("ingress", {"query": "shop", "kind": "ingress"}, "1 ingress found: shop",
     "ingress shop [shop/shop] | Static inventory prod-k8s/shop | active | 203.0.113.40, shop.example.com"),
    ("server", {"query": "prod-web-01", "kind": "server"}, "1 server found: prod-web-01",
     "server prod-web-01 | Static inventory on-prem/idc-shanghai | running | type Huawei 2288H V5"),
]


@pytest.mark.parametrize(("kind", "arguments", "summary", "fact"), SAMPLE_KINDS, ids=[k[0] for k in SAMPLE_KINDS])
async def test_a_question_about_each_kind_of_the_sample_estate_renders_its_card(
    tmp_path: Path, kind: str, arguments: dict[str, str], summary: str, fact: str
) -> None:
    async with on_slack(tmp_path, sample_estate_config(), [("c1", "find_resource", arguments)]) as env:
        card, _ = await ask(env, f"where is the {kind} {arguments['query']}?")
        done_line(card, "find_resource", summary)
        assert fact in tool_results(env.llm)["c1"], "the model was sent the resource"
        answer = answer_part(card)
        assert fact in answer, answer
        assert "sources: static inventory on-prem" in card  # provenance in the footer


async def test_listing_a_kind_renders_every_resource_of_it(tmp_path: Path) -> None:
    async with on_slack(tmp_path, sample_estate_config(), [("c1", "list_resources", {"kind": "pod"})]) as env:
        card, _ = await ask(env, "which pods are there?")
        pods = ("checkout-7d9f8-abcde", "checkout-7d9f8-fghij", "checkout-7d9f8-klmno")
        done_line(card, "list_resources", f"3 pods found: {', '.join(pods)}")
        answer = answer_part(card)
        for name in pods:
            assert f"pod {name} [shop/{name}]" in answer


async def test_exposed_ports_renders_the_group_open_to_the_world_and_its_users(tmp_path: Path) -> None:
    async with on_slack(tmp_path, sample_estate_config(), [("c1", "exposed_ports", {"port": 22})]) as env:
        card, _ = await ask(env, "which security group opens 22 to the world?")
        done_line(card, "exposed_ports", "1 security group found: web-servers")
        assert "open: allow tcp 22 from 0.0.0.0/0; used by prod-web-01, prod-web-02" in answer_part(card)


TENCENT_KINDS = [
    ("database", {"query": "10.0.3.7"}, "1 database found: orders-db",
     "database orders-db [cdb-ord00001] | Tencent Cloud prod/ap-guangzhou | running"),
    ("cache", {"query": "orders-redis"}, "1 cache found: orders-redis",
     "cache orders-redis [crs-ord00001] | Tencent Cloud prod/ap-guangzhou | running"),
    ("load balancer", {"query": "api-clb", "kind": "load_balancer"}, "1 load balancer found: api-clb",
     "load balancer api-clb [lb-api00001] | Tencent Cloud prod/ap-guangzhou | active"),
    ("security group", {"query": "sg-web00001", "kind": "security_group"}, "1 security group found: web",
     "security group web [sg-web00001] | Tencent Cloud prod/ap-guangzhou"),
    ("ip", {"query": "119.29.1.11", "kind": "ip"}, "1 elastic IP found: eip cvm00001",
     "elastic IP eip cvm00001 [eip-cvm00001] | Tencent Cloud prod/ap-guangzhou | in-use"),
    ("nat gateway", {"query": "nat-gz000001", "kind": "nat_gateway"}, "1 NAT gateway found: gz-nat",
     "NAT gateway gz-nat [nat-gz000001] | Tencent Cloud prod/ap-guangzhou | available"),
    ("dns record", {"query": "api.example.com", "kind": "dns_record"}, "1 DNS record found: api.example.com",
     "DNS record api.example.com"),
    ("bucket", {"query": "assets-1251234567"}, "1 bucket found: assets-1251234567",
     "bucket assets-1251234567 | Tencent Cloud prod/ap-guangzhou | available | PUBLIC acl public-read"),
]


@pytest.mark.parametrize(("kind", "arguments", "summary", "fact"), TENCENT_KINDS, ids=[k[0] for k in TENCENT_KINDS])
async def test_a_question_about_each_kind_on_tencent_cloud_renders_its_card(
    tmp_path: Path, kind: str, arguments: dict[str, str], summary: str, fact: str
) -> None:
    with FakeTencentEstate(secret_id="tc-id", secret_key="tc-KEY-secret") as fake:
        tencent = cloud_section(cloud_account("prod", fake, "tc-id", "tc-KEY-secret", GUANGZHOU))
        config = ToolsConfig(inventory=InventoryConfig(enabled=False), tencent=tencent, toolsets=ESTATE_TOOLSETS)
        async with on_slack(tmp_path, config, [("c1", "find_resource", arguments)]) as env:
            card, _ = await ask(env, f"what is {arguments['query']}?")
            done_line(card, "find_resource", summary)
            answer = answer_part(card)
            assert fact in answer, answer
            assert "tc-KEY-secret" not in card
            assert "_sources: Tencent Cloud prod" in card.rsplit("\n", 1)[-1]  # the footer names the source
        assert fake.calls(), "the answer came from the fake, through the SDK"


async def test_alibaba_cloud_database_found_by_its_ip_renders_its_card(tmp_path: Path) -> None:
    fake = FakeAliyunEstate(access_key="ali-id", access_secret="ALI-secret")
    with fake:
        aliyun = cloud_section(cloud_account("prod", fake, "ali-id", "ALI-secret", "cn-hangzhou"))
        config = ToolsConfig(inventory=InventoryConfig(enabled=False), aliyun=aliyun, toolsets=ESTATE_TOOLSETS)
        calls: list[ToolCallSpec] = [("c1", "find_resource", {"query": "10.0.3.7", "kind": "database"})]
        async with on_slack(tmp_path, config, calls) as env:
            card, _ = await ask(env, "what is 10.0.3.7?")
            done_line(card, "find_resource", "1 database found: prod-db-01")
            assert "database prod-db-01 [rm-bp1db01] | Alibaba Cloud prod/cn-hangzhou" in answer_part(card)
            assert "ALI-secret" not in card
        assert "DescribeDBInstances" in fake.actions()


async def test_who_changed_a_tencent_database_renders_the_principal_the_call_and_the_time(tmp_path: Path) -> None:
    with FakeTencentEstate(secret_id="tc-id", secret_key="tc-KEY-secret") as fake:
        tencent = cloud_section(cloud_account("prod", fake, "tc-id", "tc-KEY-secret", GUANGZHOU))
        config = ToolsConfig(inventory=InventoryConfig(enabled=False), tencent=tencent, toolsets=ESTATE_TOOLSETS)
        calls: list[ToolCallSpec] = [("c1", "resource_changes", {"resource": "prod-db-03", "since": "24h"})]
        async with on_slack(tmp_path, config, calls) as env:
            card, _ = await ask(env, "who stopped prod-db-03?")
            [line] = [x for x in status_lines(card) if x.startswith("✅ resource_changes · ")]
            assert "IsolateDBInstance by bob" in line, line
            assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ IsolateDBInstance by bob", answer_part(card)), card
        assert fake.actions("LookUpEvents"), "the trail was read through the SDK"


# --- the trace ---------------------------------------------------------------------------------------------


async def test_trace_renders_the_whole_chain_with_the_break_and_the_open_port(tmp_path: Path) -> None:
    async with on_slack(tmp_path, sample_estate_config(), [("c1", "trace", {"target": "api.example.com"})]) as env:
        card, _ = await ask(env, "what's behind api.example.com?")
        # The status line is the chain itself: the card shows it whatever the model says.
        chain = "api.example.com → api-lb → prod-web-01, prod-web-02 ✗ → web-servers ⚠22, lb-public · 1 break"
        line = done_line(card, "trace", chain)
        assert line.endswith(chain), line

        sent = tool_results(env.llm)["c1"]
        answer = answer_part(card)
        for text in (sent, answer):
            positions = [text.find(hop) for hop in TRACE_CHAIN]
            assert -1 not in positions and positions == sorted(positions), (positions, text)
            assert "⚠ open to the internet: allow tcp 22 from 0.0.0.0/0 — 22 (SSH)" in text
            assert "✗ backend unhealthy" in text and "Broken: prod-web-02: backend unhealthy" in text
            assert "Reachability from 0.0.0.0/0: reachable on api-lb [lb-api-01]: port 80 is open" in text


# --- scopes ------------------------------------------------------------------------------------------------


STAGING_ONLY = {
    "default_role": "none",
    "roles": {
        "admin": {"members": ["slack:UADMIN"], "tools": ["*"]},
        "staging-viewer": {"members": ["slack:U2"], "tools": ["find_resource", "list_resources", "trace"],
                           "scopes": [{"provider": "tencent", "account": "staging"}]},
    },
}


async def test_a_viewer_scoped_to_staging_never_reaches_the_prod_account(tmp_path: Path) -> None:
    with (FakeTencentEstate(secret_id="prod-id", secret_key="prod-KEY") as prod,
          FakeTencentEstate(secret_id="stg-id", secret_key="stg-KEY") as staging):
        # prod holds one database staging has not: it must not reach the scoped viewer by any path
        prod.state["cdb"].append(dict(prod.state["cdb"][0], InstanceId="cdb-ldg00009", InstanceName="orders-ledger",
                                      Vip="10.0.3.70"))
        tencent = cloud_section(cloud_account("prod", prod, "prod-id", "prod-KEY", GUANGZHOU),
                                cloud_account("staging", staging, "stg-id", "stg-KEY", GUANGZHOU))
        config = ToolsConfig(inventory=InventoryConfig(enabled=False), tencent=tencent, toolsets=ESTATE_TOOLSETS)
        calls: list[ToolCallSpec] = [("c1", "find_resource", {"query": "orders"})]
        async with on_slack(tmp_path, config, calls, access_config=STAGING_ONLY) as env:
            card, turn_id = await ask(env, "where is the orders database?", user="U2")
            assert prod.calls() == [], "the scoped asker's lookup called the prod account"
            assert staging.actions("DescribeDBInstances"), "the staging account was asked"
            done_line(card, "find_resource", "2 resources found: orders-db, orders-redis")
            for shown in (tool_results(env.llm)["c1"], answer_part(card)):
                assert "Tencent Cloud staging/ap-guangzhou" in shown
                assert "orders-ledger" not in shown and "cdb-ldg00009" not in shown and "prod/" not in shown
            record = await audit_of(env.store, turn_id)
            assert (record.principal, record.role) == ("slack:U2", "staging-viewer")

            # The control: an unscoped admin asking the same sees prod (so the scope is what kept it out).
            card, _ = await ask(env, "where is the orders database?", user="UADMIN")
            assert prod.actions("DescribeDBInstances")
            assert "orders-ledger [cdb-ldg00009] | Tencent Cloud prod/ap-guangzhou" in answer_part(card)


KUBE_SHOP_ONLY = {
    "default_role": "none",
    "roles": {
        "admin": {"members": ["slack:UADMIN"], "tools": ["*"]},
        "shop-viewer": {"members": ["slack:U3"], "tools": ["find_resource", "list_resources", "trace"],
                        "scopes": [{"provider": "kubernetes", "account": "prod", "region": "shop"}]},
    },
}


async def test_a_viewer_scoped_to_one_namespace_never_lists_another(tmp_path: Path) -> None:
    with FakeKubeApi(shop_cluster(), token="kube-TOKEN-secret") as cluster:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", {"prod": cluster})
        kube = KubernetesConfig(enabled=True, kubeconfig=str(kubeconfig), contexts=[KubeContextConfig(name="prod")])
        config = ToolsConfig(inventory=InventoryConfig(enabled=False), kubernetes=kube, toolsets=ESTATE_TOOLSETS)
        # ledger lives in payments: a name the viewer may ask about, but must not be shown
        calls: list[ToolCallSpec] = [("c1", "find_resource", {"query": "ledger"}),
                                     ("c2", "list_resources", {"kind": "pod"})]
        async with on_slack(tmp_path, config, calls, access_config=KUBE_SHOP_ONLY) as env:
            card, _ = await ask(env, "where does ledger run?", user="U3")
            # Every list call named the namespace: none of another one, none cluster-wide (nodes included).
            requests = [c for c in cluster.calls() if not c["path"].startswith("/version")]
            assert requests, "the cluster was asked"
            assert {c["namespace"] for c in requests} == {"shop"}, [c["path"] for c in requests]
            assert {c["resource"] for c in requests} >= {"pods", "deployments", "services", "ingresses"}
            results = tool_results(env.llm)
            assert "ledger" not in results["c1"].replace("'ledger'", "") and "payments/" not in results["c2"]
            assert "payments/" not in answer_part(card) and "kube-TOKEN-secret" not in card
            done_line(card, "find_resource", "nothing found that you may see")
            assert re.search(r"list_resources · [^·]+ · 4 pods found", card), card

            # The control: an unscoped admin asking the same is shown ledger, in payments.
            card, _ = await ask(env, "where does ledger run?", user="UADMIN")
            assert "ledger-5c4b9d7f6-q9w8e [payments/ledger-5c4b9d7f6-q9w8e]" in answer_part(card)


async def test_kubernetes_resources_render_with_the_provider_label_and_plurals(tmp_path: Path) -> None:
    with FakeKubeApi(shop_cluster(), token="kube-TOKEN-secret") as cluster:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", {"prod": cluster})
        kube = KubernetesConfig(enabled=True, kubeconfig=str(kubeconfig), contexts=[KubeContextConfig(name="prod")])
        config = ToolsConfig(inventory=InventoryConfig(enabled=False), kubernetes=kube, toolsets=ESTATE_TOOLSETS)
        async with on_slack(tmp_path, config, [("c1", "list_resources", {"kind": "ingress"})]) as env:
            card, _ = await ask(env, "which ingresses are there?")
            done_line(card, "list_resources", "1 ingress found: api")
            answer = answer_part(card)
            assert "ingress api [shop/api] | Kubernetes prod/shop" in answer, answer
            assert "1 match for ingresses:" in answer, answer
            assert "_sources: Kubernetes prod" in card, card


# --- the audit ---------------------------------------------------------------------------------------------


async def test_every_estate_tool_call_is_audited_with_its_arguments_and_principal(tmp_path: Path) -> None:
    calls: list[ToolCallSpec] = [
        ("c1", "find_resource", {"query": "10.0.3.7"}),
        ("c2", "trace", {"target": "api.example.com", "port": 22}),
        ("c3", "list_resources", {"kind": "bucket", "state": "available"}),
        ("c4", "exposed_ports", {"port": 22}),
        ("c5", "find_resource", {"query": "*"}),  # malformed: refused by the tool, audited all the same
    ]
    async with on_slack(tmp_path, sample_estate_config(), calls) as env:
        card, turn_id = await ask(env, "tell me about 10.0.3.7 and api.example.com")
        assert len(status_lines(card)) == len(calls)
        record = await audit_of(env.store, turn_id)
        assert record.principal == "slack:U1" and record.platform == "slack"
        audited = [(c["name"], c["arguments"]) for c in record.tool_calls]
        assert sorted(audited, key=str) == sorted(((name, args) for _, name, args in calls), key=str)
        by_name = {(c["name"], str(c["arguments"])): c for c in record.tool_calls}
        found = by_name[("find_resource", str({"query": "10.0.3.7"}))]
        assert found["ok"] and found["summary"] == "1 database found: orders-db"
        assert [s["provider"] for s in found["sources"]] == ["inventory"]
        assert not by_name[("find_resource", str({"query": "*"}))]["ok"]
