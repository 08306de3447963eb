"""The instance id: configured or derived, kept across restarts, never held by two live processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from botgateway.config import GatewayConfig, MemoryConfig
from botgateway.instance import claim_instance_id, host_name


def _sqlite(tmp_path: Path) -> MemoryConfig:
    return MemoryConfig(store="sqlite", sqlite_path=str(tmp_path / "data" / "gw.db"))


def test_with_sqlite_the_id_is_made_once_and_kept_with_the_data(tmp_path: Path) -> None:
    first = claim_instance_id(GatewayConfig(), _sqlite(tmp_path), environ={"HOSTNAME": "bot-host"})
    assert first.lasting and first.instance_id.startswith("bot-host-")
    first.release()
    again = claim_instance_id(GatewayConfig(), _sqlite(tmp_path), environ={"HOSTNAME": "another-name"})
    assert again.instance_id == first.instance_id  # a restart keeps it, whatever the host is called now
    again.release()
    assert (tmp_path / "data" / "gw.db.instance").read_text().strip() == first.instance_id


def test_a_second_live_process_on_the_same_data_gets_a_random_id(tmp_path: Path) -> None:
    first = claim_instance_id(GatewayConfig(), _sqlite(tmp_path))
    try:
        second = claim_instance_id(GatewayConfig(), _sqlite(tmp_path))
        assert not second.lasting and second.instance_id != first.instance_id
        configured = GatewayConfig(instance_id="bot-1")
        held = claim_instance_id(configured, _sqlite(tmp_path))
        assert held.lasting and held.instance_id == "bot-1"
        assert claim_instance_id(configured, _sqlite(tmp_path)).instance_id != "bot-1"
        held.release()
    finally:
        first.release()
    assert claim_instance_id(GatewayConfig(), _sqlite(tmp_path)).instance_id == first.instance_id


def test_a_killed_process_lets_its_id_go(tmp_path: Path) -> None:
    # A real process takes the id and dies without releasing it (SIGKILL): its lock goes with it.
    script = (
        "import os, signal, sys; from botgateway.config import GatewayConfig, MemoryConfig; "
        "from botgateway.instance import claim_instance_id; "
        f"claim = claim_instance_id(GatewayConfig(), MemoryConfig(sqlite_path={str(tmp_path / 'gw.db')!r})); "
        "print(claim.instance_id, flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == -9, run.stderr
    restarted = claim_instance_id(GatewayConfig(), MemoryConfig(sqlite_path=str(tmp_path / "gw.db")))
    assert restarted.lasting and restarted.instance_id == run.stdout.split()[-1]
    restarted.release()


def test_with_redis_the_id_is_the_pod_or_host_name() -> None:
    redis = MemoryConfig(store="redis", redis_prefix="test-instance:")
    assert host_name({"POD_NAME": "botgateway-7d9f-abcde", "HOSTNAME": "node-1"}) == "botgateway-7d9f-abcde"
    assert host_name({"HOSTNAME": "node 1/a"}) == "node-1-a"
    claim = claim_instance_id(GatewayConfig(), redis, environ={"POD_NAME": "botgateway-0"})
    try:
        assert claim.lasting and claim.instance_id == "botgateway-0"
        # Another process on this host with the same name (a CLI next to the server) must not share it.
        assert claim_instance_id(GatewayConfig(), redis, environ={"POD_NAME": "botgateway-0"}).instance_id != "botgateway-0"
    finally:
        claim.release()


def test_an_in_memory_store_gets_a_random_id_each_time() -> None:
    memory = MemoryConfig(sqlite_path=":memory:")
    one, two = claim_instance_id(GatewayConfig(), memory), claim_instance_id(GatewayConfig(), memory)
    assert one.instance_id != two.instance_id and not one.lasting


def test_a_configured_id_is_checked() -> None:
    with pytest.raises(ValidationError):
        GatewayConfig(instance_id="two words")
    assert GatewayConfig().instance_id == ""
