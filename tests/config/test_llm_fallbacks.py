"""``llm.fallbacks``, ``llm.breaker`` and ``llm.routes``: what they accept, and every mistake by its key path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from botgateway.config import ConfigError, parse_config
from tests.cli.cli_process import run_cli

KEY = "sk-fallback-SECRET-0123456789"
"""A recognizable key: no message may carry it."""


def llm(**section: Any) -> dict[str, Any]:
    return {"llm": {"provider": "deepseek", "api_key": "sk-primary-SECRET-0123", **section}}


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, env={})
    return caught.value.problems


def test_a_full_section_reads_with_names_and_defaults() -> None:
    config = parse_config(llm(
        fallbacks=[
            {"provider": "qwen", "api_key": KEY},
            {"name": "local", "base_url": "http://vllm.internal:8000/v1", "model": "qwen2.5-72b", "max_retries": 0},
        ],
        routes=[
            {"roles": ["viewer"], "model": "deepseek-chat"},
            {"name": "secret", "channels": ["slack:C0SECRET*"], "endpoint": "local", "fallbacks": []},
            {"channels": ["dingtalk:*"], "endpoint": {"provider": "ollama", "model": "qwen2.5"}},
        ],
    ), env={}).llm
    assert config.fallback_names() == ["fallback1", "local"]
    assert config.route_names() == ["route1", "secret", "route3"]
    assert config.breaker.failures == 1 and config.breaker.cooldown_s == 60


def test_an_endpoint_runs_with_its_own_place_key_and_model_and_the_sections_patience() -> None:
    config = parse_config(llm(
        first_token_timeout_s=7, max_retries=3, extra_body={"thinking": {"type": "enabled"}},
        fallbacks=[
            {"provider": "qwen", "api_key": KEY},
            {"base_url": "http://vllm.internal:8000/v1", "model": "m", "max_retries": 0, "extra_body": {}},
        ],
    ), env={}).llm
    qwen = config.endpoint_settings(config.fallbacks[0])
    assert qwen.resolved_base_url == "https://dashscope.aliyuncs.com/compatible-mode/v1"
    assert qwen.resolved_model == "qwen-plus"
    assert qwen.api_key.get_secret_value() == KEY
    assert qwen.first_token_timeout_s == 7 and qwen.max_retries == 3
    assert qwen.extra_body == {"thinking": {"type": "enabled"}}
    local = config.endpoint_settings(config.fallbacks[1], model="other")
    assert local.resolved_base_url == "http://vllm.internal:8000/v1" and local.resolved_model == "other"
    assert local.max_retries == 0 and local.extra_body == {}
    primary = config.endpoint_settings(model="deepseek-chat")
    assert primary.resolved_base_url == "https://api.deepseek.com/v1" and primary.resolved_model == "deepseek-chat"
    assert primary.fallbacks == [] and primary.routes == []


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"fallbacks": [{"name": "primary", "base_url": "http://a/v1", "model": "m"}]},
         "llm.fallbacks[0].name: the name is taken; endpoint names must be unique"),
        ({"fallbacks": [{"name": "b", "base_url": "http://a/v1", "model": "m"},
                        {"name": "b", "base_url": "http://c/v1", "model": "m"}]},
         "llm.fallbacks[1].name: the name is taken"),
        ({"fallbacks": [{}]}, "llm.fallbacks[0]: needs a provider, a base_url or an api_key"),
        ({"fallbacks": [{"provider": "moonshot"}]}, "llm.fallbacks[0]: provider 'moonshot' needs api_key"),
        ({"fallbacks": [{"base_url": "http://a/v1", "api_key": KEY}]},
         "llm.fallbacks[0]: base_url is set but model is not"),
        ({"fallbacks": [{"name": "has space", "base_url": "http://a/v1", "model": "m"}]},
         "llm.fallbacks[0].name: a name is 1-40 letters"),
        ({"routes": [{"model": "m"}]}, "llm.routes[0]: a route needs channels or roles"),
        ({"routes": [{"roles": ["viewer"]}]}, "llm.routes[0]: a route needs endpoint or model"),
        ({"routes": [{"channels": ["C0SECRET"], "model": "m"}]}, "llm.routes[0].channels: channel 'C0SECRET' is not a qualified id"),
        ({"routes": [{"roles": ["viewer"], "endpoint": "nope"}]},
         "llm.routes[0].endpoint: not an endpoint (known: primary)"),
        ({"routes": [{"roles": ["viewer"], "model": "m", "fallbacks": ["primary", "nope"]}]},
         "llm.routes[0].fallbacks[1]: not an endpoint (known: primary)"),
        ({"routes": [{"name": "r", "roles": ["viewer"], "model": "m"}, {"name": "r", "roles": ["viewer"], "model": "n"}]},
         "llm.routes[1].name: the name is taken; route names must be unique"),
        ({"routes": [{"roles": ["viewer"], "endpoint": {"name": "primary", "base_url": "http://a/v1", "model": "m"}}]},
         "llm.routes[0].endpoint.name: the name is taken by another endpoint"),
        ({"routes": [{"roles": ["nobody"], "model": "m"}]},
         "llm.routes[0].roles[0]: not a role under access.roles (known: "),
        ({"breaker": {"failures": 0}}, "llm.breaker.failures:"),
    ],
)
def test_each_mistake_is_named_by_its_key_path(section: dict[str, Any], expected: str) -> None:
    problems = problems_of(llm(**section))
    assert any(problem.startswith(expected) for problem in problems), problems


def test_a_routes_roles_are_those_of_the_access_policy() -> None:
    access = {"roles": {"oncall": {"members": ["slack:U0ONCALL"], "tools": ["*"]}}}
    parse_config({**llm(routes=[{"roles": ["oncall"], "model": "m"}]), "access": access}, env={})
    [problem] = problems_of({**llm(routes=[{"roles": ["viewer"], "model": "m"}]), "access": access})
    assert problem.startswith("llm.routes[0].roles[0]: not a role under access.roles (known: oncall)")


def test_no_key_of_an_endpoint_reaches_a_message() -> None:
    problems = problems_of(llm(
        fallbacks=[{"provider": "qwen", "api_key": KEY, "model": 12345678912345},
                   {"name": KEY, "base_url": "http://a/v1", "model": "m"}],
        routes=[{"roles": ["viewer"], "endpoint": {"provider": "openai", "api_key": KEY, "base_url": 5}}],
    ))
    assert problems and all(KEY not in problem for problem in problems)


def test_check_config_names_a_routes_unknown_endpoint(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "llm:\n"
        "  provider: custom\n"
        "  base_url: http://127.0.0.1:9/v1\n"
        "  model: m\n"
        "  fallbacks:\n"
        "    - {name: backup, base_url: 'http://127.0.0.1:10/v1', model: b}\n"
        "  routes:\n"
        "    - {channels: ['slack:C0SECRET*'], endpoint: local}\n"
        "tools:\n  inventory: {enabled: false}\n",
        encoding="utf-8",
    )
    run = run_cli("check-config", "-c", str(path), cwd=tmp_path)
    assert run.returncode == 1 and "Traceback" not in run.stderr + run.stdout
    assert "llm.routes[0].endpoint: not an endpoint (known: primary, backup)" in run.stderr
    path.write_text(path.read_text(encoding="utf-8").replace("endpoint: local", "endpoint: backup"), encoding="utf-8")
    run = run_cli("check-config", "-c", str(path), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
