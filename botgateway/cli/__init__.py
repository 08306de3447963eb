"""The composition root and the ``botgateway`` command line.

The only part of :mod:`botgateway` that imports the platform adapters
(:mod:`adapters`) and the concrete tools (:mod:`tools`): it reads
``config.yaml``, builds the runtime from the core's parts and those, and runs
the sub-commands (``run``, ``chat``, ``ask``, ``tools``, ``check-config``).
"""

from __future__ import annotations

from botgateway.cli.main import main

__all__ = ["main"]
