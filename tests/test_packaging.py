"""A clean first run: the package's metadata is what setuptools builds without a deprecation warning.

setuptools 77 takes the license as an SPDX expression with ``license-files``
(PEP 639) and warns, a screen per build, about the older table form
(``license = {text = …}``) and about license classifiers. ``make run``
installs the package first, so the metadata is read here as setuptools reads
it: the expression, the files it names, and a build requirement that
understands them. (The real build downloads setuptools: too slow for the suite.)
"""

from __future__ import annotations

import tomllib
from typing import Any

from packaging.licenses import canonicalize_license_expression
from packaging.requirements import Requirement

from tests.paths import REPO


def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_license_is_an_spdx_expression_whose_files_exist() -> None:
    project = pyproject()["project"]
    assert project["license"] == canonicalize_license_expression(project["license"]) == "Apache-2.0"
    for pattern in project["license-files"]:
        assert sorted(REPO.glob(pattern)), f"license-files pattern {pattern!r} matches no file"
    assert "Apache License" in (REPO / "LICENSE").read_text(encoding="utf-8")
    # A license classifier beside an expression is deprecated too.
    assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")]


def test_the_build_requires_a_setuptools_that_reads_the_expression() -> None:
    requires = [Requirement(text) for text in pyproject()["build-system"]["requires"]]
    setuptools = next(req for req in requires if req.name == "setuptools")
    # No version before 77 may be chosen: it would reject the expression, or warn about it.
    assert not any(setuptools.specifier.contains(old) for old in ("68.0", "75.8.0", "76.1.0"))
    assert setuptools.specifier.contains("77.0.0")
