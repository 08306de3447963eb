"""``botgateway access explain`` as an admin runs it: a subprocess over a config with an access policy."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.cli.cli_process import run_cli
from tests.paths import SAMPLE_INVENTORY

POLICY = {
    "default_role": "none",
    "channels": {"allow": ["slack:C0OPS", "slack:C0PUBLIC"], "direct_messages": False},
    "roles": {
        "oncall": {"members": ["slack:S0ONCALL", "slack:U0ALICE"], "tools": ["find_server", "search_*"],
                   "scopes": [{"provider": "inventory"}], "limits": {"turns_per_minute": 5}},
        "admin": {"members": ["slack:U0ROOT"], "tools": ["*"], "approve": True},
    },
    "guardrails": {"slack:C0PUBLIC": {"tools": ["find_server"]}},
    "approvals": {"tools": ["search_*"]},
}


def explain(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "tools": {"inventory": {"enabled": True, "path": str(SAMPLE_INVENTORY)}},
        "memory": {"sqlite_path": str(tmp_path / "state.db")},
        "access": POLICY,
    }))
    return run_cli("access", "explain", *args, "-c", str(config), cwd=tmp_path)


def row(output: str, label: str) -> str:
    """The value cell of the table row ``label``."""
    line = next(line for line in output.splitlines() if f" {label} " in line)
    return line.split("│")[2].strip()


def test_a_member_sees_the_tools_of_the_channel_the_scopes_the_approvals_and_the_limits(tmp_path: Path) -> None:
    ops = explain(tmp_path, "slack:U0ALICE", "--channel", "slack:C0OPS")
    assert ops.returncode == 0, ops.stderr
    assert row(ops.stdout, "roles") == "oncall"
    assert row(ops.stdout, "tools offered") == "find_server, search_inventory_by_ip"  # list_servers is not hers
    assert row(ops.stdout, "resources") == "provider=inventory"
    assert row(ops.stdout, "need an approval") == "search_inventory_by_ip"
    assert "turns_per_minute=5" in row(ops.stdout, "limits")
    assert ops.stderr == ""  # no log lines bury the answer

    public = explain(tmp_path, "slack:U0ALICE", "--channel", "slack:C0PUBLIC")
    assert row(public.stdout, "tools offered") == "find_server"  # the channel's guardrail


def test_refusals_say_why(tmp_path: Path) -> None:
    stranger = explain(tmp_path, "slack:U0NOBODY", "--channel", "slack:C0OPS")
    assert stranger.returncode == 0 and "no role" in stranger.stdout
    elsewhere = explain(tmp_path, "slack:U0ROOT", "--channel", "slack:C0RANDOM")
    assert "refused" in elsewhere.stdout and "no role" not in elsewhere.stdout
    external = explain(tmp_path, "slack:U0ALICE", "--channel", "slack:C0OPS", "--external")
    assert "another organisation" in external.stdout


def test_a_principal_that_is_not_qualified_is_a_usage_error(tmp_path: Path) -> None:
    bad = explain(tmp_path, "U0ALICE")
    assert bad.returncode == 2
    assert "not a qualified principal" in bad.stderr and "Traceback" not in bad.stderr


def check_config(tmp_path: Path, access: dict[str, object] | None) -> subprocess.CompletedProcess[str]:
    body: dict[str, object] = {
        "adapters": {"slack": {"enabled": True, "bot_token": "xoxb-1-2-secretbot", "app_token": "xapp-1-A1-2-secretapp"}},
        "tools": {"inventory": {"enabled": True, "path": str(SAMPLE_INVENTORY)}},
    }
    if access is not None:
        body["access"] = access
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(body))
    return run_cli("check-config", "-c", str(config), cwd=tmp_path)


def test_check_config_warns_when_a_chat_platform_is_open_to_everyone(tmp_path: Path) -> None:
    default = check_config(tmp_path, None)  # no access section: everyone of the workspace is a viewer
    assert default.returncode == 0 and default.stdout.strip() == "OK"
    assert "warning: access: anyone in your slack organisation may ask" in default.stderr
    wildcard = check_config(tmp_path, {"default_role": "none", "roles": {"all": {"members": ["slack:*"], "tools": ["find_server"]}}})
    assert "anyone in your slack organisation" in wildcard.stderr
    assert "secretbot" not in default.stderr + wildcard.stderr


def test_check_config_is_quiet_about_a_policy_that_names_its_people_or_channels(tmp_path: Path) -> None:
    members = check_config(tmp_path, {"default_role": "none", "roles": {"oncall": {"members": ["slack:U0ALICE"], "tools": ["*"]}}})
    channels = check_config(tmp_path, {"default_role": "viewer", "channels": {"allow": ["slack:C0OPS"], "direct_messages": False},
                                       "roles": {"viewer": {"tools": ["find_server"]}}})
    for result in (members, channels):
        assert result.returncode == 0 and result.stdout.strip() == "OK"
        assert "warning" not in result.stderr


def test_check_config_warns_about_direct_chats_open_to_everyone(tmp_path: Path) -> None:
    result = check_config(tmp_path, {"default_role": "viewer", "channels": {"allow": ["slack:C0OPS"]},
                                     "roles": {"viewer": {"tools": ["find_server"]}}})
    assert result.returncode == 0 and "may ask the bot, in a direct chat" in result.stderr


def test_check_config_warns_when_calls_wait_for_an_approval_nobody_may_give(tmp_path: Path) -> None:
    base = {"default_role": "none", "roles": {"oncall": {"members": ["slack:U0ALICE"], "tools": ["*"]}},
            "approvals": {"tools": ["*__restart*"], "timeout_s": 120}}
    nobody = check_config(tmp_path, base)
    assert nobody.returncode == 0 and "no role has approve: true" in nobody.stderr and "120 s" in nobody.stderr
    approver = {**base, "roles": {**base["roles"], "lead": {"members": ["slack:U0BOB"], "tools": ["*"], "approve": True}}}
    assert "warning" not in check_config(tmp_path, approver).stderr
