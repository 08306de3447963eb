"""The eval suite's cases: reading and checking the YAML case files, and scoring one answer against its case.

A case file is a mapping with a ``cases:`` list (and optionally a file-wide
default ``estate:``), or the list alone. Each case::

    id: orders-db-by-ip              # unique across the suite
    question: what is 10.0.3.7?
    tags: [database, inventory]      # its kind and provider, for the pass rate per tag
    estate: ../estates/other.yaml    # optional: an inventory-format file, relative to this file,
                                     # or the inventory mapping inline; default: the sample inventory
    facts: [orders-db, [running, 运行]]  # each must appear in the answer (case-insensitive);
                                     # a list is alternatives: any one of them
    not_facts: [reporting-db]        # optional: none may appear
    tools: [[find_resource, trace]]  # optional: each must have been called (a list: any one of them)

Every problem of every file is reported at once, each naming the file, the
case and the field. Matching ignores case, Markdown emphasis and runs of
white space, so ``**prod-db-03**`` holds the fact ``prod-db-03``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Case", "CaseFileError", "EstateRef", "Verdict", "case_files", "load_cases", "normalize", "score"]

_CASE_KEYS = frozenset({"id", "question", "tags", "estate", "facts", "not_facts", "tools"})
_FILE_KEYS = frozenset({"cases", "estate"})
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}")
_MARKUP = re.compile(r"[*`]")
_SPACE = re.compile(r"\s+")


class CaseFileError(Exception):
    """Case files that cannot be run; ``problems`` holds one ``file: where: what`` line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        """Every problem found, each naming its file and field."""
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class EstateRef:
    """The estate a case runs against: an inventory-format file, or a mapping written inline in the case file."""

    path: Path | None
    """The file (resolved); None for an inline estate."""
    inline: str = ""
    """The inline estate as YAML text (``hosts: []`` added when it has none)."""
    declared: str = ""
    """Where the case file names it (``cases.yaml: cases[3] (id x): estate``), for error messages."""

    @property
    def key(self) -> str:
        """Equal for cases that can share one runtime."""
        return str(self.path) if self.path is not None else "inline:" + self.inline

    @property
    def label(self) -> str:
        """How a report names it."""
        return self.path.name if self.path is not None else "written inline"


@dataclass(frozen=True)
class Case:
    """One question and what its answer must hold."""

    id: str
    """Unique across the suite."""
    question: str
    """Asked as the local user, in a conversation of its own."""
    tags: tuple[str, ...]
    """Its kind and provider tags."""
    facts: tuple[tuple[str, ...], ...]
    """Each must appear in the answer: one of its alternatives."""
    estate: EstateRef
    """What the tools answer from."""
    not_facts: tuple[str, ...] = ()
    """None may appear in the answer."""
    tools: tuple[tuple[str, ...], ...] = ()
    """Tools that must have been called: one of each entry's alternatives."""
    source: str = ""
    """The case file it came from."""


@dataclass(frozen=True)
class Verdict:
    """How one answer scored against its case."""

    missing_facts: tuple[str, ...] = ()
    """Facts not found (alternatives shown as ``a | b``)."""
    unwanted_facts: tuple[str, ...] = ()
    """``not_facts`` that appeared."""
    missing_tools: tuple[str, ...] = ()
    """Required tools that were not called (alternatives shown as ``a | b``)."""
    error: str = ""
    """Why the turn failed, when it did."""

    @property
    def passed(self) -> bool:
        """Every fact present, no unwanted one, every tool called, and the turn completed."""
        return not (self.missing_facts or self.unwanted_facts or self.missing_tools or self.error)

    def reasons(self) -> list[str]:
        """Why it failed, one short phrase each."""
        out = [f"turn failed: {self.error}"] if self.error else []
        out += [f"missing {fact!r}" for fact in self.missing_facts]
        out += [f"should not say {fact!r}" for fact in self.unwanted_facts]
        out += [f"did not call {name}" for name in self.missing_tools]
        return out


def normalize(text: str) -> str:
    """``text`` for matching: case-folded, Markdown emphasis dropped, white space collapsed."""
    return _SPACE.sub(" ", _MARKUP.sub("", text)).casefold().strip()


def score(case: Case, answer: str, tool_names: Iterable[str], *, error: str = "") -> Verdict:
    """Score ``answer`` (and the tools called for it) against ``case``; ``error`` is why the turn failed, if it did."""
    said = normalize(answer)
    missing = tuple(" | ".join(alts) for alts in case.facts if not any(normalize(a) in said for a in alts))
    unwanted = tuple(fact for fact in case.not_facts if normalize(fact) in said)
    called = set(tool_names)
    uncalled = tuple(" | ".join(alts) for alts in case.tools if not called.intersection(alts))
    return Verdict(missing, unwanted, uncalled, error)


def case_files(path: Path) -> list[Path]:
    """``path`` itself, or the ``*.yaml``/``*.yml`` files under it, sorted; raises :class:`CaseFileError` if none."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise CaseFileError([f"{path}: no such file or folder of cases"])
    files = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
    if not files:
        raise CaseFileError([f"{path}: holds no *.yaml case file"])
    return files


def load_cases(path: Path, default_estate: Path) -> list[Case]:
    """Every case under ``path`` (a file or a folder); ``default_estate`` for cases that name none.

    Raises :class:`CaseFileError` listing every problem of every file.
    """
    problems: list[str] = []
    cases: list[Case] = []
    first_seen: dict[str, str] = {}
    for file in case_files(path):
        for case in _read_file(file, default_estate, problems):
            if case.id in first_seen:
                problems.append(f"{file}: case {case.id!r}: id already used in {first_seen[case.id]}")
                continue
            first_seen[case.id] = str(file)
            cases.append(case)
    if problems:
        raise CaseFileError(problems)
    return cases


def _read_file(file: Path, default_estate: Path, problems: list[str]) -> list[Case]:
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        problems.append(f"{file}: cannot read: {exc.strerror or exc}")
        return []
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problems.append(f"{file}: not valid YAML" + (f" (line {mark.line + 1})" if mark else ""))
        return []
    if isinstance(data, list):
        data = {"cases": data}
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list) or not data["cases"]:
        problems.append(f"{file}: cases: expected a non-empty list of cases (a 'cases:' list, or the list alone)")
        return []
    for key in sorted(set(data) - _FILE_KEYS, key=str):
        problems.append(f"{file}: {key}: unknown field (a case file holds cases and estate)")
    estate = default_estate.resolve()
    if "estate" in data:
        estate_ref = _estate(data["estate"], file, f"{file}: estate", problems)
        if estate_ref is None:
            return []
    else:
        estate_ref = EstateRef(estate, declared=f"{file}: (default)")
    out = []
    for index, raw in enumerate(data["cases"]):
        case = _case(raw, file, index, estate_ref, problems)
        if case is not None:
            out.append(case)
    return out


def _case(raw: Any, file: Path, index: int, estate: EstateRef, problems: list[str]) -> Case | None:
    if not isinstance(raw, dict):
        problems.append(f"{file}: cases[{index}]: expected a mapping with id, question, tags and facts")
        return None
    label = f"{file}: cases[{index}]" + (f" (id {raw['id']})" if isinstance(raw.get("id"), str) else "")
    before = len(problems)
    for key in sorted(set(raw) - _CASE_KEYS, key=str):
        problems.append(f"{label}: {key}: unknown field (a case has {', '.join(sorted(_CASE_KEYS))})")
    case_id = raw.get("id")
    if not isinstance(case_id, str) or not _ID.fullmatch(case_id):
        problems.append(f"{label}: id: required: letters, digits, '-', '_' or '.' (at most 80)")
    question = raw.get("question")
    if not isinstance(question, str) or not question.strip():
        problems.append(f"{label}: question: required: the question's text")
    tags = _strings(raw.get("tags"), f"{label}: tags", problems, required=True)
    facts = _alternatives(raw.get("facts"), f"{label}: facts", problems, required=True)
    not_facts = _strings(raw.get("not_facts", []), f"{label}: not_facts", problems)
    tools = _alternatives(raw.get("tools", []), f"{label}: tools", problems)
    if "estate" in raw:
        estate = _estate(raw["estate"], file, f"{label}: estate", problems) or estate
    if len(problems) > before:
        return None
    assert isinstance(case_id, str) and isinstance(question, str)  # checked above
    return Case(id=case_id, question=question.strip(), tags=tags, facts=facts, estate=estate,
                not_facts=not_facts, tools=tools, source=str(file))


def _strings(value: Any, where: str, problems: list[str], *, required: bool = False) -> tuple[str, ...]:
    if not isinstance(value, list) or (required and not value):
        problems.append(f"{where}: expected a {'non-empty ' if required else ''}list of strings")
        return ()
    texts = [_text(item) for item in value]
    bad = [i for i, text in enumerate(texts) if not text]
    if bad:
        problems.append(f"{where}[{bad[0]}]: expected a non-empty string")
        return ()
    return tuple(texts)


def _alternatives(
    value: Any, where: str, problems: list[str], *, required: bool = False
) -> tuple[tuple[str, ...], ...]:
    """A list whose items are a string, or a list of alternative strings."""
    if not isinstance(value, list) or (required and not value):
        need = "required: a non-empty list" if required else "expected a list"
        problems.append(f"{where}: {need} of strings (a nested list: alternatives)")
        return ()
    out: list[tuple[str, ...]] = []
    for i, item in enumerate(value):
        alternatives = [_text(a) for a in item] if isinstance(item, list) else [_text(item)]
        if alternatives and all(alternatives):
            out.append(tuple(alternatives))
        else:
            problems.append(f"{where}[{i}]: expected a non-empty string or a non-empty list of alternatives")
    return tuple(out)


def _text(value: Any) -> str:
    """A fact as text: YAML reads a bare port (3306) as a number and 2026-11-30 as a date; anything else is no fact."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float, date)):
        return ""
    return str(value).strip()


def _estate(value: Any, file: Path, where: str, problems: list[str]) -> EstateRef | None:
    if isinstance(value, str) and value.strip():
        path = (file.parent / value.strip()).resolve()
        if not path.is_file():
            problems.append(f"{where}: {value!r} is not a file (paths are relative to {file.name})")
            return None
        return EstateRef(path, declared=where)
    if isinstance(value, Mapping) and value:
        estate = {"hosts": [], **value}
        return EstateRef(None, yaml.safe_dump(estate, sort_keys=True, allow_unicode=True), declared=where)
    problems.append(f"{where}: expected a path to an inventory file, or the inventory mapping inline")
    return None
