"""Running ``botgateway`` as an operator does: a subprocess with a clean environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO

__all__ = ["run_cli"]

_FOREIGN = ("LLM_", "OPENAI_", "SLACK_", "DINGTALK_", "REDIS_", "BOTGATEWAY_", "ALIBABA_CLOUD_")
"""Variables of the machine that a config may read: a test's config must not pick them up."""


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``botgateway ARGS…`` in ``cwd``; a hang fails the test (and ends the child) after 60 s."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    env["PYTHONPATH"] = str(REPO)
    env["COLUMNS"] = "200"  # rich tables on one line each
    return subprocess.run(
        [sys.executable, "-m", "botgateway.cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
