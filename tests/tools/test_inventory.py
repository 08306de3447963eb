"""The static inventory provider, with the shipped sample file and with files written per test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from botgateway.config import ConfigError, InventoryConfig, ToolsConfig
from botgateway.tooling import ToolContext, ToolRegistry
from tests.paths import SAMPLE_INVENTORY
from tools.catalog import build_toolset
from tools.providers.base import ServerQuery
from tools.providers.inventory import InventoryProvider, resolve_path
from tools.server_record import STATUSES, SearchResult

SAMPLE = SAMPLE_INVENTORY
CTX = ToolContext(user_id="U1", platform="cli")


async def registry_for(path: Path | str = SAMPLE) -> tuple[ToolRegistry, object]:
    toolset = await build_toolset(ToolsConfig(inventory=InventoryConfig(path=str(path))))
    return ToolRegistry(toolset.tools), toolset


def test_the_sample_inventory_is_realistic() -> None:
    data = yaml.safe_load(SAMPLE.read_text())
    hosts = data["hosts"]
    assert len(hosts) >= 30
    assert {h["env"] for h in hosts} == {"prod", "staging", "dev", "office"}
    assert sum(h["status"] == "stopped" for h in hosts) >= 2
    assert all(h["status"] in STATUSES for h in hosts)
    provider = InventoryProvider(InventoryConfig(path=str(SAMPLE)))
    assert len(provider.servers) == len(hosts)  # every host validates


async def test_lookup_by_ip_finds_the_mysql_primary() -> None:
    registry, toolset = await registry_for()
    try:
        assert registry.names == [
            "search_inventory_by_ip", "find_server", "list_servers",
            "find_resource", "list_resources", "trace", "exposed_ports", "resource_changes",
            "resource_metrics",  # the sample estate's recorded hour of metrics
        ]
        # every lookup only reads: an alert's investigation may use them all
        assert registry.read_only_names() == set(registry.names)
        out = await registry.execute("search_inventory_by_ip", {"ip": "10.0.1.100"}, CTX)
        assert out.ok and out.summary.startswith("1 instance found: ")
        line = out.content.splitlines()[1]
        assert line.startswith("- prod-db-01 | Static inventory")
        for fact in ("idc-shanghai/A03", "running", "64 vCPU/256 GiB", "Rocky Linux 9.3", "role=mysql-primary", "owner=dba-team"):
            assert fact in line

        secondary = await registry.execute("search_inventory_by_ip", {"ip": "10.0.20.11"}, CTX)
        assert "prod-web-01" in secondary.content  # a second interface
        public = await registry.execute("find_server", {"query": "203.0.113.12"}, CTX)
        assert "prod-web-02" in public.content

        nothing = await registry.execute("search_inventory_by_ip", {"ip": "10.99.99.99"}, CTX)
        assert nothing.ok and nothing.summary == "no instance found"
        assert "No instance matches ip 10.99.99.99" in nothing.content

        bad = await registry.execute("search_inventory_by_ip", {"ip": "10.0.1"}, CTX)
        assert not bad.ok and "'10.0.1' is not a valid IPv4 or IPv6 address" in bad.content
    finally:
        await toolset.aclose()  # type: ignore[attr-defined]


async def test_find_and_list_with_filters() -> None:
    registry, toolset = await registry_for()
    try:
        by_name = await registry.execute("find_server", {"query": "KAFKA"}, CTX)
        assert by_name.summary.startswith("3 instances found: ")
        by_id = await registry.execute("find_server", {"query": "office-nas-01"}, CTX)
        assert by_id.summary.startswith("1 instance found: ")

        stopped = await registry.execute("list_servers", {"status": "stopped", "tag": "env=prod"}, CTX)
        assert stopped.summary.startswith("1 instance found: ") and "prod-db-03" in stopped.content
        beijing = await registry.execute("list_servers", {"region": "idc-beijing", "tag": "role=k8s-worker"}, CTX)
        assert beijing.summary == "4 instances found"  # three prod workers and one staging
        limited = await registry.execute("list_servers", {"limit": 5}, CTX)
        assert limited.content.count("\n- ") == 5 and "showing the first 5" in limited.content
        wrong = await registry.execute("list_servers", {"status": "sleeping"}, CTX)
        assert not wrong.ok and "status" in wrong.content
    finally:
        await toolset.aclose()  # type: ignore[attr-defined]


async def test_a_lookup_returns_its_data_beside_the_text_the_model_reads() -> None:
    registry, toolset = await registry_for()
    try:
        out = await registry.execute("find_server", {"query": "10.0.1.100"}, CTX)
        assert out.data["kind"] == "server_search" and out.data["searched"] == ["inventory"]
        assert [s["name"] for s in out.data["servers"]] == ["prod-db-01"]
        assert out.data["servers"][0]["private_ips"] == ["10.0.1.100"]
        result = SearchResult.from_data(out.data)
        assert result is not None and out.content == result.render()  # the text is the data's rendering
        assert registry.recall(out.content) == out
        nothing = await registry.execute("search_inventory_by_ip", {"ip": "10.99.99.99"}, CTX)
        assert nothing.data["servers"] == [] and nothing.data["query"] == "ip 10.99.99.99"
        assert SearchResult.from_data({"query": "x"}) is None  # data of another kind
    finally:
        await toolset.aclose()  # type: ignore[attr-defined]


def test_the_provider_names_its_hosts_and_sees_an_edit(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump({"name": "lab", "hosts": [{"name": "bastion", "ip": "10.1.0.1"}, {"name": "db-01"}]}))
    provider = InventoryProvider(InventoryConfig(path=str(path)))
    assert provider.host_names() == ["bastion", "db-01"]  # the file's own name labels the account, not a host
    path.write_text(yaml.safe_dump({"hosts": [{"name": "jump"}]}))
    stat = path.stat()
    os.utime(path, (stat.st_atime, stat.st_mtime + 5))  # a distinct mtime even on coarse clocks
    assert provider.host_names() == ["jump"]


async def test_csv_inventory(tmp_path: Path) -> None:
    path = tmp_path / "hosts.csv"
    path.write_text(
        "name,ips,env,datacenter,os,cpu,memory_gb,status,owner,tags\n"
        "edge-01,10.8.0.1;10.9.0.1,prod,idc-gz,Debian 12,8,16,running,net,role=edge;tier=1\n"
        "edge-02,10.8.0.2,prod,idc-gz,Debian 12,8,16,stopped,net,role=edge\n"
    )
    provider = InventoryProvider(InventoryConfig(path=str(path)))
    result = await provider.search(ServerQuery("ip", "10.9.0.1"))
    assert [s.name for s in result.servers] == ["edge-01"]
    server = result.servers[0]
    assert server.tags == {"role": "edge", "tier": "1", "env": "prod", "owner": "net"}
    assert server.cpu == 8 and server.memory_gb == 16 and server.region == "idc-gz"
    stopped = await provider.search(ServerQuery("list", status="stopped"))
    assert [s.name for s in stopped.servers] == ["edge-02"]


async def test_the_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump({"hosts": [{"name": "a-01", "ip": "10.1.0.1"}]}))
    provider = InventoryProvider(InventoryConfig(path=str(path)))
    assert [s.name for s in (await provider.search(ServerQuery("ip", "10.1.0.1"))).servers] == ["a-01"]
    path.write_text(yaml.safe_dump({"hosts": [{"name": "b-01", "ip": "10.1.0.1"}]}))
    stat = path.stat()
    os.utime(path, (stat.st_atime, stat.st_mtime + 5))  # a distinct mtime even on coarse clocks
    assert [s.name for s in (await provider.search(ServerQuery("ip", "10.1.0.1"))).servers] == ["b-01"]

    # A broken edit keeps the last good copy serving.
    path.write_text("hosts: [")
    os.utime(path, (stat.st_atime, stat.st_mtime + 10))
    assert [s.name for s in (await provider.search(ServerQuery("ip", "10.1.0.1"))).servers] == ["b-01"]


def test_bad_files_are_config_errors_naming_every_problem(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as caught:
        InventoryProvider(InventoryConfig(path=str(missing)))
    assert caught.value.problems == [f"tools.inventory.path: inventory file {str(missing)!r} does not exist"]

    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "hosts": [
                    {"name": "ok-01", "ip": "10.0.0.1"},
                    {"name": "typo-01", "ip": "10.0.0.256"},
                    {"name": "typo-02", "ip": "10.0.0.3", "status": "sleeping", "colour": "red"},
                    {"name": "ok-01", "ip": "10.0.0.4"},
                ]
            }
        )
    )
    with pytest.raises(ConfigError) as caught:
        InventoryProvider(InventoryConfig(path=str(bad)))
    problems = caught.value.problems
    assert any(p.startswith("bad.yaml host #2 (typo-01): ip:") for p in problems)
    assert any(p.startswith("bad.yaml host #3 (typo-02): status: unknown status 'sleeping'") for p in problems)
    assert "bad.yaml host #3 (typo-02): colour: unknown field" in problems
    assert "bad.yaml host #4 (ok-01): duplicate host 'ok-01'" in problems

    garbage = tmp_path / "garbage.yaml"
    garbage.write_text("hosts: [\n  - name: x\n  oops")
    with pytest.raises(ConfigError) as caught:
        InventoryProvider(InventoryConfig(path=str(garbage)))
    assert "is not valid YAML at line" in caught.value.problems[0]


def test_the_default_path_resolves_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the shipped default must not depend on the working directory
    assert resolve_path("tools/sample_inventory.yaml") == SAMPLE
