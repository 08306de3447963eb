"""The documentation site: every config key in the generated reference, the site built strict, the README's links.

The reference is generated from the config models at build time
(:mod:`botgateway.config.reference`, through the hook
``docs/hooks/config_reference.py``); these tests walk the models on their own
and hold the page to them, and build the site as ``make test`` does, so a
broken link, a missing page or a key without a docstring fails here too.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field, SecretStr

from botgateway.config import Config
from botgateway.config.reference import anchor, object_docs, render_reference
from botgateway.config.section import Section
from tests.paths import REPO

HEADING = re.compile(r"^#{2,3} (?:`(?P<path>[^`]+)`|Top level) \{#(?P<anchor>[^}]+)\}$")
ROW = re.compile(r"^\| `(?P<key>[^`]+)` \| (?P<rest>.+) \|$")


def config_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key path under ``model``, walked here on its own: a list's items as ``[]``, a mapping's values as
    ``<name>``, a key by its alias where it has one."""
    for name, field in model.model_fields.items():
        path = f"{prefix}.{field.alias or name}" if prefix else field.alias or name
        yield path
        for suffix, child in nested_models(field.annotation):
            yield from config_paths(child, path + suffix)


def nested_models(annotation: Any, suffix: str = "") -> Iterator[tuple[str, type[BaseModel]]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield suffix, annotation
    elif typing.get_origin(annotation) is list:
        yield from nested_models(typing.get_args(annotation)[0], suffix + "[]")
    elif typing.get_origin(annotation) is dict:
        yield from nested_models(typing.get_args(annotation)[1], suffix + ".<name>")
    elif typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from nested_models(arg, suffix)


def documented_rows(markdown: str) -> dict[str, list[str]]:
    """Each key path the page documents → its row's cells after the key (type, default, description)."""
    rows: dict[str, list[str]] = {}
    current: str | None = None
    for line in markdown.splitlines():
        if heading := HEADING.match(line):
            current = heading["path"] or ""
        elif (row := ROW.match(line)) and current is not None:
            path = f"{current}.{row['key']}" if current else row["key"]
            assert path not in rows, f"{path} is documented twice"
            rows[path] = row["rest"].split(" | ", 2)
    return rows


def test_every_config_key_appears_in_the_reference_with_its_type_default_and_docstring() -> None:
    keys = set(config_paths(Config))
    rows = documented_rows(render_reference())
    assert len(keys) > 250  # the walk reached the nested sections, list items and mapping values
    assert sorted(keys - rows.keys()) == []
    assert sorted(rows.keys() - keys) == []
    for path, cells in rows.items():
        assert len(cells) == 3 and all(cell.strip() for cell in cells), f"{path}: {cells}"
    undocumented = [k.path for obj in object_docs(Config) for k in obj.keys if not k.doc]
    assert undocumented == [], "give each of these fields a docstring (the string under the field)"


def test_the_reference_shows_what_the_code_says() -> None:
    rows = documented_rows(render_reference())
    assert rows["llm.max_retries"] == ["integer (≥ 0, ≤ 10)", "`3`", rows["llm.max_retries"][2]]
    assert "Retries of connection errors, 429 and 5xx" in rows["llm.max_retries"][2]
    # A nested object's default is its parent's: the tool phase of a policy is faster than the class's defaults.
    assert rows["adapters.slack.policy.tool.min_chars"][1] == "`5`"
    assert rows["adapters.slack.policy.answer.min_chars"][1] == "`20`"
    assert rows["alerts.routes[].continue"][1] == "`false`"  # the key as YAML writes it, not continue_
    assert rows["schedules[].cron"][1] == "*required*"
    assert "`team=~\"web|db\"`" in rows["access.roles.<name>.scopes[].metric_matchers"][2]
    assert rows["alerts.grafana_url"][0] == "string"


class Leaf(Section):
    """A leaf object."""

    size: int = Field(3, ge=1, le=9)
    """How big | it is."""


class Root(Section):
    """The root object."""

    mode: Literal["a", "b"] = "a"
    """Which mode, ``a`` or ``b``.

    A second paragraph, after :attr:`~tests.Leaf.size`."""
    token: SecretStr = SecretStr("")
    """A secret."""
    leaf: Leaf = Leaf(size=5)
    """One leaf."""
    items: list[Leaf] = Field(default_factory=list)
    """Leaves in a list."""
    named: dict[str, Leaf] | None = None
    """Leaves by name."""
    continue_: bool = Field(False, alias="continue")
    """A key that is a Python keyword."""
    needed: str
    """Must be given."""


def test_a_model_renders_as_tables_of_its_keys() -> None:
    page = render_reference(Root)
    rows = documented_rows(page)
    assert rows == {
        "mode": ['`"a"` or `"b"`', '`"a"`', "Which mode, `a` or `b`.<br><br>A second paragraph, after `size`."],
        "token": ["secret string", '`""`', "A secret."],
        "leaf": ["[object](#leaf)", "*see its table*", "One leaf."],
        "leaf.size": ["integer (≥ 1, ≤ 9)", "`5`", "How big \\| it is."],
        "items": ["list of [object](#items)", "`[]`", "Leaves in a list."],
        "items[].size": ["integer (≥ 1, ≤ 9)", "`3`", "How big \\| it is."],
        "named": ["mapping of string to [object](#named-name) or `null`", "`null` (unset)", "Leaves by name."],
        "named.<name>.size": ["integer (≥ 1, ≤ 9)", "`3`", "How big \\| it is."],
        "continue": ["boolean", "`false`", "A key that is a Python keyword."],
        "needed": ["string", "*required*", "Must be given."],
    }
    assert "### `named.<name>` {#named-name}" in page and "## Top level {#top-level}" in page


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built as ``make test`` builds it (strict), into a folder of its own."""
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def test_the_site_builds_strict_with_the_generated_reference(site: Path) -> None:
    reference = html.unescape((site / "reference" / "configuration" / "index.html").read_text())
    for obj in object_docs(Config):
        assert f'id="{anchor(obj.path)}"' in reference
        for key in obj.keys:
            assert f"<code>{key.name}</code>" in reference
    for page in ("getting-started", "slack", "dingtalk", "web", "clients", "mcp", "alerts", "schedules", "access",
                 "fleet", "toolsets", "metrics-and-cost", "charts", "configuration"):
        assert (site / page / "index.html").is_file(), page
    assert "fonts.googleapis.com" not in (site / "index.html").read_text()  # read offline: no web fonts


def test_the_readme_is_short_and_its_links_lead_into_the_docs() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 80
    assert "make run" in readme and "make test" in readme
    targets = re.findall(r"\]\(([^)#\s]+)", readme)
    assert "docs/images/console-chart.png" in targets
    assert len([t for t in targets if t.startswith("docs/") and t.endswith(".md")]) >= 15
    assert [t for t in targets if not (REPO / t).is_file()] == []
    assert (REPO / "docs" / "images" / "console-chart.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
