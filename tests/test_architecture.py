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

ROOT = Path(__file__).resolve().parent.parent
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
        ("botgateway/budget.py", "import slack_sdk", "Only the adapters talk to a chat platform's SDK"),
        ("adapters/terminal.py", "from botgateway.cli.runtime import Runtime", "Adapters import neither"),
        ("tools/catalog.py", "import adapters.slack", "Tools import neither"),
        ("botgateway/sink.py", "import botgateway.gateway", "No import cycles inside botgateway"),
    ],
)
def test_a_layering_mistake_breaks_a_contract(tree: Path, module: str, line: str, contract: str) -> None:
    inject(tree / module, line)
    result = lint(tree)
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in " ".join(broken.split()), result.stdout
