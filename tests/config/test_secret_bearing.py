"""Which config values may hold a credential, decided in one place, and what error lines may say of them."""

from __future__ import annotations

import pytest

from botgateway.config import ConfigError, McpServerConfig, parse_config
from botgateway.config.problems import plain_word
from botgateway.config.section import is_secret_bearing


def problems_of(data: object) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, env={})
    return caught.value.problems


@pytest.mark.parametrize("name", ["command", "args", "env", "headers", "url"])
def test_every_mcp_value_a_secret_can_travel_in_is_secret_bearing(name: str) -> None:
    assert is_secret_bearing(name, McpServerConfig.model_fields[name])


def test_plain_settings_are_not() -> None:
    assert not is_secret_bearing("timeout_s", McpServerConfig.model_fields["timeout_s"])
    assert not is_secret_bearing("allow", McpServerConfig.model_fields["allow"])


def test_wrong_values_under_a_secret_bearing_key_are_never_echoed() -> None:
    problems = problems_of(
        {"tools": {"mcp": [{"name": "m", "command": 767676767676, "args": ["--ok", 989898989898], "timeout_s": "soon"}]}}
    )
    joined = "\n".join(problems)
    assert "tools.mcp[0].command: Input should be a valid string" in joined
    assert "tools.mcp[0].args[1]: Input should be a valid string" in joined
    assert "767676767676" not in joined and "989898989898" not in joined
    assert "tools.mcp[0].timeout_s:" in joined and "'soon'" in joined  # plain settings still show what was given


def test_an_echoed_value_that_looks_like_a_token_is_masked() -> None:
    joined = "\n".join(problems_of({"tools": {"mcp": [{"name": "sk-live-nametoken1!", "command": "x"}]}}))
    assert "tools.mcp[0].name:" in joined and "sk-live-nametoken1" not in joined


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("github-mcp-server", "github-mcp-server"),
        ("/usr/local/bin/mcp-server --port 3", "/usr/local/bin/mcp-server"),
        ("run --api-token=sk-live-abc", "run"),
        ("API_TOKEN=abc123 run", None),
        ("sk-live-abc123456", None),
        ("ghp_0123456789abcdefghijKLMNOP", None),
        ("https://user:pw@host/x", None),
        ("", None),
    ],
)
def test_only_a_first_word_that_cannot_hold_a_secret_is_named(text: str, shown: str | None) -> None:
    assert plain_word(text) == shown
