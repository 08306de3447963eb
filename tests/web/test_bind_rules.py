"""Where the API may be served: this host by default, another address only with a way to authenticate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from botgateway.config import ConfigError, load_config, parse_config
from botgateway.config.web import web_served
from tests.paths import REPO

KEY = {"name": "ci", "key": "ci-key-0123456789abcdef"}


def test_the_default_config_serves_the_api_on_localhost_only() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "SLACK_", "DINGTALK_", "BOTGATEWAY_"))}
    config = load_config(REPO / "config.yaml", env)
    assert config.http.enabled and config.http.host == "127.0.0.1" and web_served(config)
    assert parse_config({}, env={}).http.host == "127.0.0.1"  # the schema's default too


def test_a_non_loopback_address_without_auth_is_a_config_error_naming_both_fixes() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"http": {"enabled": True, "host": "0.0.0.0"}}, env={})
    message = str(caught.value)
    assert "web.enabled" in message and "0.0.0.0" in message
    assert "web.api_keys" in message and "web.admin_password_hash" in message and "web.enabled: false" in message


@pytest.mark.parametrize(
    "sections",
    [
        {"http": {"enabled": True, "host": "0.0.0.0"}, "web": {"api_keys": [KEY]}},
        {"http": {"enabled": True, "host": "10.0.0.5"},
         "web": {"admin_password_hash": "scrypt$" + "00" * 16 + "$" + "00" * 32}},
        {"http": {"enabled": True, "host": "0.0.0.0"}, "web": {"enabled": False}},
        {"http": {"enabled": True, "host": "::1"}},
        {"http": {"enabled": False, "host": "0.0.0.0"}},  # nothing is served
    ],
)
def test_auth_or_no_api_lets_any_address_be_bound(sections: dict[str, dict[str, object]]) -> None:
    parse_config(sections, env={})


def test_metrics_alone_start_the_server_and_so_the_rule_applies() -> None:
    with pytest.raises(ConfigError):
        parse_config({"metrics": {"enabled": True}, "http": {"host": "0.0.0.0"}}, env={})


def test_check_config_names_the_fixes(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"http": {"enabled": True, "host": "0.0.0.0"}}))
    script = Path(sys.executable).parent / "botgateway"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "botgateway.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "SLACK_", "DINGTALK_", "BOTGATEWAY_"))}
    result = subprocess.run([*command, "check-config", "-c", str(path)], check=False, capture_output=True, text=True,
                            env=env, timeout=60, cwd=tmp_path)
    assert result.returncode != 0
    assert "web.api_keys" in result.stderr and "web.enabled: false" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_short_or_repeated_key_is_refused_without_repeating_it() -> None:
    with pytest.raises(ConfigError) as short:
        parse_config({"web": {"api_keys": [{"name": "ci", "key": "tooshort"}]}}, env={})
    assert "at least 16 characters" in str(short.value) and "tooshort" not in str(short.value)
    with pytest.raises(ConfigError) as twice:
        parse_config({"web": {"api_keys": [KEY, KEY]}}, env={})
    assert "ci is used more than once" in str(twice.value)
