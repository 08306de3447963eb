"""A serving process's garbage collector: start-up frozen, young collections rarer (in a process of its own)."""

from __future__ import annotations

import json
import subprocess
import sys

from botgateway.cli.collector import THRESHOLDS

_PROBE = """
import gc, json
from botgateway.cli.collector import settle_after_startup
before = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}
settle_after_startup()
print(json.dumps({"before": before, "threshold": gc.get_threshold(), "frozen": gc.get_freeze_count(),
                  "tracked": len(gc.get_objects())}))
"""


def test_settling_freezes_start_up_and_raises_the_thresholds() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(done.stdout)
    assert seen["before"]["frozen"] == 0
    assert tuple(seen["threshold"]) == THRESHOLDS != tuple(seen["before"]["threshold"])
    # What start-up built (the imported modules, classes and functions) is out of every collection's walk.
    assert seen["frozen"] > 10_000 > seen["tracked"]
