"""The bounds of config loading, at their edges: what is just inside still loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from botgateway.config import ConfigError, load_config
from botgateway.config.loading import MAX_FILE_BYTES
from botgateway.config.yaml_limits import MAX_ALIAS_VALUES, MAX_DEPTH, YamlLimitError, load_yaml


def test_nesting_up_to_the_bound_loads_and_one_more_level_does_not() -> None:
    inside = "x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)  # the mapping itself is the first level
    depth, value = 2, load_yaml(inside)["x"]  # the outer list is the second level
    while value:
        depth, value = depth + 1, value[0]
    assert depth == MAX_DEPTH
    with pytest.raises(YamlLimitError, match=f"nested deeper than {MAX_DEPTH} levels"):
        load_yaml("x: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH)


def test_an_alias_may_not_nest_past_the_bound_either() -> None:
    half = MAX_DEPTH // 2 + 1
    text = "a: &a " + "[" * half + "]" * half + "\nb: " + "[" * half + "*a" + "]" * half
    with pytest.raises(YamlLimitError, match="once aliases are expanded"):
        load_yaml(text)


def test_aliases_are_counted_by_what_they_expand_to() -> None:
    block = "[" + ", ".join(["1"] * 99) + "]"  # 100 values with the list itself
    uses = MAX_ALIAS_VALUES // 100
    inside = load_yaml(f"a: &a {block}\nb: [" + ", ".join(["*a"] * uses) + "]")
    assert len(inside["b"]) == uses and inside["b"][0] is inside["a"]
    with pytest.raises(YamlLimitError, match="aliases expand to more than"):
        load_yaml(f"a: &a {block}\nb: [" + ", ".join(["*a"] * (uses + 1)) + "]")


def test_a_file_at_the_size_bound_is_read(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    head = b"llm:\n  provider: demo\n"
    path.write_bytes(head + b"#" * (MAX_FILE_BYTES - len(head) - 1) + b"\n")
    assert load_config(path, env={}).llm.provider == "demo"
    path.write_bytes(head + b"#" * (MAX_FILE_BYTES - len(head)) + b"\n")
    with pytest.raises(ConfigError, match="larger than 1 MiB") as caught:
        load_config(path, env={})
    assert caught.value.source == str(path) and len(caught.value.problems) == 1


def test_a_utf8_file_with_a_byte_order_mark_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes("\ufeffllm:\n  system_prompt: café\n".encode())
    assert load_config(path, env={}).llm.system_prompt == "café"
