"""Configuration: env substitution, precise errors with hints, secrets that never print, presets, check-config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from botgateway.config import ConfigError, load_config, parse_config, staleness_warnings
from tests.paths import REPO

ROOT = REPO


def problems_of(data: object, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, env or {})
    return info.value.problems


# --- ${VAR} substitution ----------------------------------------------------------------


def test_env_variables_and_defaults_are_substituted_everywhere() -> None:
    config = parse_config(
        {
            "llm": {
                "provider": "${LLM_PROVIDER:-deepseek}",
                "api_key": "${LLM_API_KEY}",
                "base_url": "http://${LLM_HOST}:${LLM_PORT:-8000}/v1",
                "max_rounds": "${ROUNDS:-4}",
            },
            "gateway": {"admins": ["${ADMIN_1}", "U_STATIC"]},
            "memory": {"sqlite_path": "${STATE_DIR:-/var/lib/botgateway}/state.db"},
        },
        env={"LLM_API_KEY": "sk-from-env-123", "LLM_HOST": "10.1.2.3", "ADMIN_1": "U_ADMIN", "STATE_DIR": ""},
    )
    assert config.llm.provider == "deepseek"
    assert config.llm.api_key.get_secret_value() == "sk-from-env-123"
    assert config.llm.base_url == "http://10.1.2.3:8000/v1"
    assert config.llm.max_rounds == 4  # "4" from the default, then validated as an int
    assert config.gateway.admins == ["U_ADMIN", "U_STATIC"]
    assert config.memory.sqlite_path == "/var/lib/botgateway/state.db"  # empty variable -> the default


def test_a_missing_variable_is_named_with_its_path() -> None:
    problems = problems_of({"adapters": {"slack": {"bot_token": "${SLACK_BOT_TOKEN}"}}})
    assert len(problems) == 1
    assert problems[0].startswith("adapters.slack.bot_token:")
    assert "SLACK_BOT_TOKEN is not set" in problems[0]
    assert "${SLACK_BOT_TOKEN:-" in problems[0]  # the hint shows how to make it optional


def test_variables_come_from_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BG_TEST_MODEL", "qwen-max")
    path = tmp_path / "config.yaml"
    path.write_text("llm:\n  provider: qwen\n  api_key: sk-x12345\n  model: ${BG_TEST_MODEL}\n", encoding="utf-8")
    assert load_config(path).llm.resolved_model == "qwen-max"


# --- unknown keys and wrong types --------------------------------------------------------


def test_unknown_key_gets_its_path_and_a_did_you_mean() -> None:
    problems = problems_of({"llm": {"modle": "gpt-4o"}, "adapters": {"slack": {"bot_tokn": "x"}}})
    assert "llm.modle: unknown key (did you mean 'model'?)" in problems
    assert "adapters.slack.bot_tokn: unknown key (did you mean 'bot_token'?)" in problems


def test_metrics_host_and_port_of_an_older_config_are_told_where_they_moved() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"metrics": {"enabled": True, "host": "127.0.0.1", "port": 9100}}, env={})
    assert info.value.problems == [
        "metrics.host: moved to http.host (one HTTP server now serves /metrics, /healthz and /readyz); set http.host instead",
        "metrics.port: moved to http.port (one HTTP server now serves /metrics, /healthz and /readyz); set http.port instead",
    ]
    moved = parse_config({"metrics": {"enabled": True}, "http": {"host": "127.0.0.1", "port": 9100}}, env={})
    assert (moved.http.host, moved.http.port, moved.http.enabled) == ("127.0.0.1", 9100, False)


def test_workers_drain_and_replicas_are_bounded() -> None:
    config = parse_config({}, env={})
    assert (config.gateway.workers, config.gateway.drain_s, config.gateway.replicas) == (1, 30.0, 1)
    with pytest.raises(ConfigError) as info:
        parse_config({"gateway": {"workers": 33, "drain_s": 0, "replicas": 0}}, env={})
    assert [line.split(":")[0] for line in info.value.problems] == ["gateway.workers", "gateway.drain_s", "gateway.replicas"]


def test_unknown_section_lists_the_known_ones() -> None:
    [problem] = problems_of({"lmm": {}})
    assert problem.startswith("lmm: unknown key")
    assert "llm" in problem


def test_wrong_types_name_the_path_and_the_value() -> None:
    problems = problems_of(
        {"llm": {"max_rounds": "many", "temperature": 7}, "memory": {"store": "mongo"}, "adapters": {"slack": {"http_port": 70000}}}
    )
    joined = "\n".join(problems)
    assert "llm.max_rounds:" in joined and "'many'" in joined
    assert "llm.temperature:" in joined
    assert "memory.store:" in joined and "'sqlite'" in joined  # says what is allowed
    assert "adapters.slack.http_port:" in joined
    assert len(problems) == 4  # every problem at once, not just the first


def test_list_items_have_indexed_paths() -> None:
    problems = problems_of({"tools": {"mcp": [{"name": "ok", "command": "x"}, {"name": "bad name!", "command": "y", "tiemout_s": 3}]}})
    joined = "\n".join(problems)
    assert "tools.mcp[1].name:" in joined
    assert "tools.mcp[1].tiemout_s: unknown key (did you mean 'timeout_s'?)" in joined


def test_a_file_that_is_not_a_mapping_or_not_yaml(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("- just\n- a list\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(path)
    path.write_text("llm:\n  model: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"line \d+, column \d+: invalid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "missing.yaml")


# --- secrets -----------------------------------------------------------------------------


def test_secrets_never_appear_in_repr_str_or_dumps() -> None:
    config = parse_config(
        {
            "llm": {"provider": "openai", "api_key": "sk-topsecret-abc123"},
            "adapters": {"slack": {"bot_token": "xoxb-topsecret-1", "app_token": "xapp-topsecret-2"}},
            "memory": {"redis_url": "redis://:redispw-topsecret@h:6379/0"},
        },
        env={},
    )
    texts = [repr(config), str(config), repr(config.llm), str(config.adapters.slack), config.model_dump_json(), str(config.model_dump())]
    for text in texts:
        assert "topsecret" not in text
    assert config.llm.api_key.get_secret_value() == "sk-topsecret-abc123"


def test_secrets_never_appear_in_error_messages() -> None:
    problems = problems_of(
        {
            "llm": {"provider": "openai", "api_key": "sk-topsecret-abc123", "max_rounds": 0},
            "adapters": {"dingtalk": {"client_secret": 987654321987}, "slack": {"bot_token": ["xoxb-topsecret-9"]}},
            "tools": {"mcp": [{"name": "m", "url": "http://127.0.0.1:1/mcp", "headers": {"X-Custom": 424242424242}}]},
        }
    )
    joined = "\n".join(problems)
    assert "tools.mcp[0].headers.X-Custom:" in joined and "424242424242" not in joined
    assert "adapters.dingtalk.client_secret:" in joined
    assert "adapters.slack.bot_token:" in joined
    assert "llm.max_rounds:" in joined
    assert "topsecret" not in joined and "987654321987" not in joined


def test_an_adapter_enabled_without_its_credentials_is_a_config_problem() -> None:
    problems = problems_of(
        {"adapters": {"slack": {"enabled": True, "bot_token": "xoxb-1"}, "dingtalk": {"enabled": True, "client_id": "ding1"}}}
    )
    assert "adapters.slack: enabled: true but app_token is empty (mode: socket); set it with ${ENV_VAR}, or use enabled: auto" in problems
    assert "adapters.dingtalk: enabled: true but client_secret is empty; set it with ${ENV_VAR}, or use enabled: auto" in problems
    # auto just stays off without credentials; http mode needs the signing secret instead of the app token.
    config = parse_config({"adapters": {"slack": {"enabled": "auto"}, "dingtalk": {}}}, env={})
    assert not config.adapters.slack.active and not config.adapters.dingtalk.active
    [problem] = problems_of({"adapters": {"slack": {"enabled": True, "mode": "http"}}})
    assert "bot_token and signing_secret are empty (mode: http)" in problem


# --- providers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "base_url", "model"),
    [
        ("openai", "https://api.openai.com/v1", "gpt-4o-mini"),
        ("deepseek", "https://api.deepseek.com/v1", "deepseek-chat"),
        ("qwen", "https://dashscope.aliyuncs.com/compatible-mode/v1", "qwen-plus"),
        ("dashscope", "https://dashscope.aliyuncs.com/compatible-mode/v1", "qwen-plus"),
        ("moonshot", "https://api.moonshot.cn/v1", "moonshot-v1-8k"),
        ("zhipu", "https://open.bigmodel.cn/api/paas/v4", "glm-4-flash"),
    ],
)
def test_presets_fill_base_url_and_model(provider: str, base_url: str, model: str) -> None:
    llm = parse_config({"llm": {"provider": provider, "api_key": "sk-k123456"}}, env={}).llm
    assert llm.resolved_provider == provider
    assert llm.resolved_base_url == base_url
    assert llm.resolved_model == model


def test_explicit_base_url_and_model_win_over_the_preset() -> None:
    llm = parse_config(
        {"llm": {"provider": "deepseek", "api_key": "k-123456", "base_url": "http://proxy:9000/v1", "model": "deepseek-reasoner"}},
        env={},
    ).llm
    assert llm.resolved_base_url == "http://proxy:9000/v1"
    assert llm.resolved_model == "deepseek-reasoner"


def test_keyless_local_presets_and_ark_endpoint_ids() -> None:
    assert parse_config({"llm": {"provider": "ollama"}}, env={}).llm.resolved_base_url == "http://127.0.0.1:11434/v1"
    assert parse_config({"llm": {"provider": "vllm", "model": "qwen2.5-7b"}}, env={}).llm.resolved_base_url == "http://127.0.0.1:8000/v1"
    ark = parse_config({"llm": {"provider": "doubao", "api_key": "k-123456", "model": "ep-2024-abc"}}, env={}).llm
    assert ark.resolved_base_url == "https://ark.cn-beijing.volces.com/api/v3" and ark.resolved_model == "ep-2024-abc"
    [problem] = problems_of({"llm": {"provider": "doubao", "api_key": "k-123456"}})
    assert problem.startswith("llm:") and "endpoint id" in problem


def test_providers_that_need_a_key_or_a_url_say_so() -> None:
    [problem] = problems_of({"llm": {"provider": "deepseek"}})
    assert problem.startswith("llm:") and "api_key" in problem and "${" in problem
    [problem] = problems_of({"llm": {"provider": "custom", "model": "m"}})
    assert "base_url" in problem


def test_auto_is_the_demo_without_a_key_and_openai_compatible_with_one() -> None:
    demo = parse_config({}, env={}).llm
    assert demo.provider == "auto" and demo.resolved_provider == "demo"
    assert demo.resolved_model == "botgateway-demo"
    # config.yaml's own shape: empty ${LLM_API_KEY:-} keeps the demo.
    assert parse_config({"llm": {"api_key": "${LLM_API_KEY:-}"}}, env={}).llm.resolved_provider == "demo"
    keyed = parse_config({"llm": {"api_key": "${LLM_API_KEY:-}"}}, env={"LLM_API_KEY": "sk-real-123456"}).llm
    assert keyed.resolved_provider == "openai" and keyed.resolved_base_url == "https://api.openai.com/v1"
    local = parse_config({"llm": {"base_url": "http://127.0.0.1:8000/v1", "model": "m"}}, env={}).llm
    assert local.resolved_provider != "demo" and local.resolved_base_url == "http://127.0.0.1:8000/v1"
    # Someone else's endpoint without a model: say so now instead of sending OpenAI's model name there.
    [problem] = problems_of({"llm": {"base_url": "http://127.0.0.1:11434/v1", "api_key": "${LLM_API_KEY:-}"}})
    assert problem.startswith("llm:") and "llm.model" in problem
    openai_url = parse_config({"llm": {"base_url": "https://api.openai.com/v1/", "api_key": "sk-k123456"}}, env={}).llm
    assert openai_url.resolved_model == "gpt-4o-mini"


# --- botgateway check-config ---------------------------------------------------------------


def _cli(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "SLACK_", "DINGTALK_", "REDIS_", "BOTGATEWAY_"))}
    env.update(env_extra or {})
    script = Path(sys.executable).parent / "botgateway"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "botgateway.cli"]
    return subprocess.run([*command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_check_config_accepts_the_repository_config() -> None:
    result = _cli("check-config", "-c", str(ROOT / "config.yaml"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK"


def test_check_config_names_every_problem_with_its_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "llm:\n"
        "  provider: openai\n"
        "  api_key: sk-never-print-me-42\n"
        "  max_rounds: lots\n"
        "memory:\n"
        "  max_history_tokns: 5000\n",
        encoding="utf-8",
    )
    result = _cli("check-config", "-c", str(bad))
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "memory.max_history_tokns: unknown key (did you mean 'max_history_tokens'?)" in output
    assert "llm.max_rounds:" in output and "'lots'" in output
    assert "OK" not in result.stdout
    assert "Traceback" not in output
    assert "sk-never-print-me-42" not in output


def test_check_config_reports_missing_variables_and_files_plainly(tmp_path: Path) -> None:
    needs_env = tmp_path / "env.yaml"
    needs_env.write_text("adapters:\n  slack:\n    bot_token: ${BG_UNSET_TOKEN}\n", encoding="utf-8")
    result = _cli("check-config", "-c", str(needs_env))
    assert result.returncode != 0
    assert "adapters.slack.bot_token" in result.stderr and "BG_UNSET_TOKEN" in result.stderr
    assert "Traceback" not in result.stderr

    ok = _cli("check-config", "-c", str(needs_env), env_extra={"BG_UNSET_TOKEN": "xoxb-1-2"})
    assert ok.returncode == 0 and ok.stdout.strip() == "OK"

    missing = _cli("check-config", "-c", str(tmp_path / "nope.yaml"))
    assert missing.returncode != 0
    assert "not found" in missing.stderr and "Traceback" not in missing.stderr


def test_the_cached_note_shows_by_default_and_a_threshold_no_cache_reaches_is_warned_about(tmp_path: Path) -> None:
    aws = {"aws": {"enabled": True, "accounts": [{"name": "prod", "regions": ["us-east-1"]}]}}
    default = parse_config({"tools": aws}, env={})
    # A cached result lives tools.aws.cache_ttl_s: the card's threshold is below it, so its tool line can say so.
    assert default.card.stale_after_s < default.tools.aws.cache_ttl_s
    assert staleness_warnings(default) == []
    assert staleness_warnings(parse_config({"card": {"stale_after_s": 300}}, env={})) == []  # no cached provider

    config = tmp_path / "stale.yaml"
    config.write_text(yaml.safe_dump({"card": {"stale_after_s": 300}, "tools": aws}), encoding="utf-8")
    result = _cli("check-config", "-c", str(config))
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stderr
    assert (f"{config}: warning: card: card.stale_after_s (300 s) is not below tools.aws.cache_ttl_s (60 s)"
            in result.stderr)
    assert "lower card.stale_after_s" in result.stderr


def test_check_config_runs_the_tools_own_checks(tmp_path: Path) -> None:
    bad = tmp_path / "tools.yaml"
    bad.write_text(
        "tools:\n"
        f"  inventory: {{path: {tmp_path / 'missing.yaml'}}}\n"
        "  mcp:\n"
        "    - {name: k8s, command: no-such-mcp-binary-xyz}\n",
        encoding="utf-8",
    )
    result = _cli("check-config", "-c", str(bad))
    assert result.returncode == 1
    assert "tools.inventory.path:" in result.stderr and "does not exist" in result.stderr
    assert "tools.mcp[0].command: 'no-such-mcp-binary-xyz' is not an executable on PATH" in result.stderr
    assert "OK" not in result.stdout and "Traceback" not in result.stderr
