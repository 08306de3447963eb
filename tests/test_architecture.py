"""The layering of DESIGN.md, checked by import-linter: the core owns its contracts.

``make test`` runs ``lint-imports`` on the tree; these tests show that the
contracts hold today and that they would catch the mistakes they exist for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

ROOT = REPO
LINT = Path(sys.executable).parent / "lint-imports"


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the three packages and the contracts, to break on purpose."""
    for name in ("botgateway", "adapters", "tools"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def inject(module: Path, line: str) -> None:
    """Add ``line`` after the module's ``from __future__`` import."""
    text = module.read_text()
    anchor = "from __future__ import annotations\n"
    assert anchor in text
    module.write_text(text.replace(anchor, anchor + line + "\n", 1))


def test_the_tree_keeps_every_contract() -> None:
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("botgateway/gateway.py", "from adapters.base import CardSink", "The core owns its contracts"),
        ("botgateway/cards/streamer.py", "import tools.catalog", "The core owns its contracts"),
        ("botgateway/budget/rate_budget.py", "import slack_sdk", "Only the adapters talk to a chat platform's SDK"),
        ("adapters/terminal/chat.py", "from botgateway.cli.runtime import Runtime", "Adapters import neither"),
        ("tools/catalog.py", "import adapters.slack", "Tools import neither"),
        ("botgateway/sink.py", "import botgateway.gateway", "No import cycles inside botgateway"),
        ("adapters/dingtalk/card_sink.py", "import adapters.dingtalk.sink", "No import cycles inside an adapter"),
        ("adapters/slack/presses.py", "import adapters.slack.adapter", "No import cycles inside an adapter"),
        ("botgateway/model/client.py", "import botgateway.turns.scheduler", "The core's spine"),
        ("botgateway/stores/base.py", "from botgateway.history import memory", "The core's spine"),
    ],
)
def test_a_layering_mistake_breaks_a_contract(tree: Path, module: str, line: str, contract: str) -> None:
    inject(tree / module, line)
    result = lint(tree)
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in " ".join(broken.split()), result.stdout


def layout_entries(readme: str) -> list[Path]:
    """The paths the layout section of docs/layout.md names, each joined to its parent folder by indentation."""
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    parents: list[tuple[int, Path]] = []
    named: list[Path] = []
    for line in block.splitlines():
        head = line.split("  ", 1)[0] if not line.startswith(" ") else line.strip().split("  ", 1)[0]
        indent = len(line) - len(line.lstrip(" "))
        if not head or indent > 12 or "`" in head:
            continue  # a continuation line or a description
        while parents and parents[-1][0] >= indent:
            parents.pop()
        base = parents[-1][1] if parents else Path()
        for name in (n.strip() for n in head.split(",")):
            if name.endswith("/") or name.endswith(".py"):
                named.append(base / name)
        if head.endswith("/"):
            parents.append((indent, base / head))
    return named


def test_the_documented_layout_names_only_what_exists() -> None:
    named = layout_entries((ROOT / "docs" / "layout.md").read_text())
    assert len(named) > 40
    missing = [str(path) for path in named if not (ROOT / path).exists()]
    assert missing == []


def test_the_documented_layout_names_every_package_of_the_code() -> None:
    named = {str(path).rstrip("/") for path in layout_entries((ROOT / "docs" / "layout.md").read_text())}
    packages = {
        str(init.parent.relative_to(ROOT))
        for top in ("botgateway", "adapters", "tools")
        for init in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert packages - named == set()
