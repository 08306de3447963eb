"""Where things are, for tests at any depth of the tests/ tree."""

from __future__ import annotations

from pathlib import Path

__all__ = ["FAKES", "REPO", "SAMPLE_INVENTORY"]

REPO = Path(__file__).resolve().parent.parent
"""The repository's root."""

FAKES = REPO / "tests" / "fakes"
"""The fakes of external services (some run as subprocesses)."""

SAMPLE_INVENTORY = REPO / "tools" / "sample_inventory.yaml"
"""The static inventory the default config ships with."""
