"""MkDocs hook: writes the configuration reference page at every build, from the config models, so it cannot drift.

The page (:data:`PAGE`) is not a file in ``docs/``: it is generated in memory by
:func:`botgateway.config.reference.render_reference` and added to the site's
files before the navigation is built, so ``nav`` can name it like any page.
"""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files

from botgateway.config.reference import render_reference

PAGE = "reference/configuration.md"
"""Where the reference lives in the site (``nav`` names it)."""


def on_files(files: Files, config: Any) -> Files:
    """Add the generated reference page to the site's files."""
    files.append(File.generated(config, PAGE, content=render_reference()))
    return files
