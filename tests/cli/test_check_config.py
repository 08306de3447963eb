"""``botgateway check-config`` on hostile input, run as an operator runs it: a subprocess.

Every bad file ends in one plain line that names the file, exit code 1 and no
traceback; no value a secret may hide in is ever echoed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.cli_process import run_cli


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    # A hang fails the test; the 2 s target is measured, not asserted.
    return run_cli("check-config", "-c", str(path), cwd=path.parent)


def assert_one_clear_line(run: subprocess.CompletedProcess[str], path: Path, *words: str) -> str:
    """The run failed with exactly one line, naming ``path`` and saying ``words``; that line is returned."""
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"{path}: ")
    for word in words:
        assert word in lines[0]
    return lines[0]


# --- files no config ever looks like ------------------------------------------------------------


def test_a_file_that_is_not_utf8_names_the_byte_and_its_offset(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("llm:\n  system_prompt: caf\xe9\n".encode("latin-1"))
    assert_one_clear_line(check_config(path), path, "UTF-8", "0xe9", "offset 25")


def test_yaml_nested_twenty_thousand_levels_deep(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("llm: " + "[" * 20_000 + "]" * 20_000 + "\n", encoding="utf-8")
    assert_one_clear_line(check_config(path), path, "nested deeper than 64 levels")


def test_an_alias_bomb_is_refused_instead_of_expanded(tmp_path: Path) -> None:
    # "Billion laughs": 9 levels of 9 aliases each, 9**9 leaves once expanded.
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, 9):
        previous, name = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert_one_clear_line(check_config(path), path, "aliases expand to more than")


def test_a_sixty_megabyte_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    line = "# " + "x" * 77 + "\n"
    with path.open("w", encoding="utf-8") as out:
        out.write("llm:\n  provider: demo\n")
        out.write(line * (60 * 1024 * 1024 // len(line)))
    assert_one_clear_line(check_config(path), path, "larger than 1 MiB")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: &a [*a]\n", ("refers to the collection that holds it",)),
        ("llm:\n  max_rounds: " + "9" * 5000 + "\n", ("line 2", "cannot be read", "quote it")),
        ("llm:\n  model: 2024-02-30\n", ("line 2", "day is out of range", "quote it")),
        ("llm:\n  model: a\x00b\n", ("position 15", "unacceptable character #x0000")),
    ],
    ids=["recursive-alias", "huge-integer", "impossible-date", "nul-character"],
)
def test_other_unloadable_values_end_in_one_line(tmp_path: Path, text: str, words: tuple[str, ...]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    assert_one_clear_line(check_config(path), path, *words)


def test_aliases_of_ordinary_size_still_load(tmp_path: Path) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text(
        "tools:\n"
        "  inventory: {enabled: false}\n"
        "  mcp:\n"
        "    - &server {name: one, command: " + sys.executable + ", timeout_s: 5}\n"
        "    - {<<: *server, name: two}\n",
        encoding="utf-8",
    )
    run = check_config(path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "OK"
