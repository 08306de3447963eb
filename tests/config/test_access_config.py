"""The ``access:`` section's scopes: PromQL label matchers for metric queries, checked when the config loads."""

from __future__ import annotations

import pytest
import yaml

from botgateway.config import ConfigError, parse_config

CONFIG = """
access:
  default_role: viewer
  roles:
    viewer:
      tools: ["*"]
      scopes:
        - tags: {env: "!prod"}
          metric_matchers: ['env!="prod"', 'team=~"web|db"', 'path!~"/internal/.*\\\\.json"']
"""


def _with_matchers(*matchers: str) -> dict[str, object]:
    data = yaml.safe_load(CONFIG)
    data["access"]["roles"]["viewer"]["scopes"][0]["metric_matchers"] = list(matchers)
    return data


def test_matchers_load_from_yaml_as_written() -> None:
    config = parse_config(yaml.safe_load(CONFIG), {})
    assert config.access is not None
    scope = config.access.roles["viewer"].scopes[0]
    assert scope.metric_matchers == ['env!="prod"', 'team=~"web|db"', 'path!~"/internal/.*\\\\.json"']
    assert scope.tags == {"env": "!prod"}


def test_a_scope_without_matchers_has_none() -> None:
    data = yaml.safe_load(CONFIG)
    del data["access"]["roles"]["viewer"]["scopes"][0]["metric_matchers"]
    config = parse_config(data, {})
    assert config.access is not None and config.access.roles["viewer"].scopes[0].metric_matchers == []


@pytest.mark.parametrize("bad", [
    "env!=prod",  # the value must be quoted
    "env != \"prod\"",  # no spaces
    "env==\"prod\"",
    "1env=\"prod\"",
    "env=\"prod\"} or up{a=\"b\"",  # one matcher, not a selector's worth
    "env=\"a\",team=\"b\"",
    "env=\"unterminated",
    "",
])
def test_a_bad_matcher_is_a_config_error_naming_it(bad: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with_matchers('env!="prod"', bad), {})
    (problem,) = caught.value.problems
    assert problem.startswith("access.roles.viewer.scopes[0].metric_matchers: ")
    assert repr(bad) in problem and "PromQL label matcher" in problem
