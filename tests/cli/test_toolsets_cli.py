"""``tools list`` and ``check-config`` on the toolsets: each one's readiness, and the exact fix for what is missing."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.cli.cli_process import run_cli
from tests.paths import SAMPLE_INVENTORY


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: nothing listens there


def write_config(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"""
tools:
  inventory: {{path: {SAMPLE_INVENTORY}}}
  aws:
    enabled: true
    timeout_s: 2
    accounts:
      - name: prod
        regions: [us-east-1]
        access_key_id: AKIAEXAMPLESECRETID1
        access_key_secret: wJalrXUtnFEMIexampleSecretKeyValue
        endpoint: http://127.0.0.1:{port}
  kubernetes:
    enabled: true
    kubeconfig: {tmp_path / "missing-kubeconfig"}
    contexts: [{{name: prod}}]
""")
    return path


def test_tools_list_probes_each_source_and_names_the_fix(tmp_path: Path) -> None:
    run = run_cli("tools", "list", "-c", str(write_config(tmp_path, closed_port())), cwd=tmp_path)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "Traceback" not in out
    assert "Toolsets" in out and "who stopped prod-db-03" in out
    flat = " ".join(out.split())
    assert "✗ AWS API of prod/us-east-1 (" in flat and "network" in flat and "unreachable" in flat.lower()
    assert "kubeconfig" in flat and "KUBECONFIG" in flat
    assert "needs setup" in flat
    assert "wJalrXUtnFEMI" not in out and "AKIAEXAMPLESECRETID1" not in out


def test_check_config_warns_of_missing_prerequisites_without_calling_anything(tmp_path: Path) -> None:
    run = run_cli("check-config", "-c", str(write_config(tmp_path, closed_port())), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "OK"
    warnings = [line for line in run.stderr.splitlines() if "tools.toolsets" in line]
    assert any("(kubernetes, changes)" in line and "missing-kubeconfig" in line for line in warnings), run.stderr
    assert not any("AWS API" in line for line in warnings)  # nothing was called
    assert "wJalrXUtnFEMI" not in run.stderr


def test_a_toolset_asked_for_by_name_without_a_provider_is_named(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("tools:\n  inventory: {enabled: false}\n  toolsets: [kubernetes]\n")
    run = run_cli("check-config", "-c", str(path), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "tools.toolsets (kubernetes): a provider for kubernetes: enable a provider that has it (tools.kubernetes)" in run.stderr
    quiet = tmp_path / "quiet.yaml"
    quiet.write_text("tools:\n  inventory: {enabled: false}\n")  # the default "every toolset" asks for none by name
    assert "tools.toolsets" not in run_cli("check-config", "-c", str(quiet), cwd=tmp_path).stderr
