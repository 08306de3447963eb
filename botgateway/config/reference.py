"""The configuration reference: every key of ``config.yaml`` with its type, default and docstring, as Markdown.

The documentation site's "Configuration reference" page is this module's
output, written at every build by the MkDocs hook ``docs/hooks/config_reference.py``,
so the page cannot drift from the models. The models are walked from
:class:`~botgateway.config.schema.Config` down: each object (a section, an item
of a list, a value of a mapping) is one table, each key one row. A key's text is
its attribute docstring (the string under the field), read from the source with
:mod:`ast`; pydantic keeps only ``description``, which few fields set.

Paths name a list's items with ``[]`` and a mapping's values with ``<name>``:
``llm.fallbacks[].name``, ``access.roles.<name>.tools``. Each table is headed by
its object's path, and its rows name the keys (``name``, ``tools``).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

__all__ = ["KeyDoc", "ObjectDoc", "anchor", "field_docstrings", "object_docs", "render_reference"]

_INTRO = """\
# Configuration reference

Every key `config.yaml` accepts, generated from the configuration's models
(`botgateway/config/`) each time the site is built, so it always matches the code.
How the file is read (`${VAR}` substitution, its limits, `check-config`) is in
[Configuration](../configuration.md).

A path names the items of a list with `[]` and the values of a mapping with
`<name>`: `llm.fallbacks[].name` is the `name` of each fallback endpoint,
`access.roles.<name>.tools` the `tools` of each role. A key whose default is
*required* must be given whenever its object is.
"""


@dataclass(frozen=True)
class KeyDoc:
    """One key of the file."""

    path: str
    """Its full path (``llm.fallbacks[].name``)."""
    type: str
    """Its type, as Markdown (links to the tables of nested objects)."""
    default: str
    """Its default, as Markdown (``required`` when it has none)."""
    doc: str
    """Its docstring, as Markdown on one line (paragraphs joined with ``<br>``)."""

    @property
    def name(self) -> str:
        """The key itself, the last part of its path (``name``), as its object's table shows it."""
        return self.path.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class ObjectDoc:
    """One object of the file (a section, a list's item, a mapping's value) and its keys."""

    path: str
    """Its path (``llm.fallbacks[]``); empty for the file itself."""
    doc: str
    """The model's docstring, as Markdown."""
    keys: tuple[KeyDoc, ...]
    """Its keys, in the model's order."""


def anchor(path: str) -> str:
    """The HTML id of the table of the object at ``path`` (``llm.fallbacks[]`` → ``llm-fallbacks``)."""
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "top-level"


def render_reference(root: type[BaseModel] | None = None) -> str:
    """The reference page of ``root`` (default: the whole file, :class:`~botgateway.config.schema.Config`)."""
    if root is None:
        from botgateway.config.schema import Config

        root = Config
    # The tables sit in one block the site's stylesheet knows (the md_in_html extension reads Markdown inside it).
    lines = [_INTRO, '<div class="config-reference" markdown>', ""]
    for obj in object_docs(root):
        depth = "##" if obj.path.count(".") == 0 else "###"
        title = f"`{obj.path}`" if obj.path else "Top level"
        lines += [f"{depth} {title} {{#{anchor(obj.path)}}}", "", obj.doc, ""]
        lines += ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
        lines += [f"| `{k.name}` | {k.type} | {k.default} | {k.doc} |" for k in obj.keys]
        lines.append("")
    lines.append("</div>")
    return "\n".join(lines)


def object_docs(root: type[BaseModel]) -> list[ObjectDoc]:
    """Every object under ``root``, depth first in the models' order: the file itself, then each nested object."""
    return list(_walk(root, "", None))


def _walk(model: type[BaseModel], path: str, instance: BaseModel | None) -> Iterator[ObjectDoc]:
    docs = field_docstrings(model)
    keys: list[KeyDoc] = []
    nested: list[tuple[type[BaseModel], str, BaseModel | None]] = []
    for name, field in model.model_fields.items():
        key = _join(path, field.alias or name)
        value = getattr(instance, name) if instance is not None else _default(field)
        children = list(_models_in(field.annotation))
        keys.append(KeyDoc(key, _type_text(field, key), _default_text(field, value, bool(children)),
                           _markdown(docs.get(name) or field.description or "")))
        nested += [(child, key + suffix, value if isinstance(value, child) else None) for suffix, child in children]
    yield ObjectDoc(path, _markdown(inspect.cleandoc(model.__doc__ or "")), tuple(keys))
    for child, child_path, child_instance in nested:
        yield from _walk(child, child_path, child_instance)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _models_in(annotation: Any, suffix: str = "") -> Iterator[tuple[str, type[BaseModel]]]:
    """The models a value of ``annotation`` may hold, each with the path suffix that reaches it (``[]``, ``.<name>``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield suffix, annotation
        return
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list:
        yield from _models_in(args[0], suffix + "[]")
    elif origin is dict:
        yield from _models_in(args[1], suffix + ".<name>")
    elif origin in (typing.Union, types.UnionType):
        for arg in args:
            yield from _models_in(arg, suffix)


def _default(field: FieldInfo) -> Any:
    if field.default is PydanticUndefined and field.default_factory is None:
        return PydanticUndefined
    return field.get_default(call_default_factory=True, validated_data={})


def _default_text(field: FieldInfo, value: Any, nested: bool) -> str:
    if value is PydanticUndefined:
        return "*required*"
    if isinstance(value, BaseModel):
        return "*see its table*"
    if nested and value is None:
        return "`null` (unset)"
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    text = json.dumps(value, ensure_ascii=False, default=str)
    return _code(text)


def _code(text: str) -> str:
    """``text`` as a code span (a table row does not split at a pipe inside one; a backtick in it gets a longer fence)."""
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}" if fence == "`" else f"{fence} {text} {fence}"


def _type_text(field: FieldInfo, path: str) -> str:
    text = _annotation_text(field.annotation, path)
    limits = [_limit_text(m) for m in field.metadata]
    shown = [limit for limit in limits if limit]
    return f"{text} ({', '.join(shown)})" if shown else text


_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string", SecretStr: "secret string",
            type(None): "`null`"}
"""How a scalar type reads."""


def _annotation_text(annotation: Any, path: str) -> str:
    """``annotation`` in words; a nested model links to its table (under ``path`` plus the suffix that reaches it)."""
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if annotation is Any:
        return "any value"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[object](#{anchor(path)})"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        choices = [_code(json.dumps(a, ensure_ascii=False)) for a in args]
        return " or ".join(choices) if len(choices) <= 2 else "one of " + ", ".join(choices)
    if origin is list:
        return f"list of {_annotation_text(args[0], path + '[]')}"
    if origin is dict:
        return f"mapping of {_annotation_text(args[0], path)} to {_annotation_text(args[1], path + '.<name>')}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_annotation_text(arg, path) for arg in args)
    return _code(getattr(annotation, "__name__", str(annotation)))


def _limit_text(meta: Any) -> str:
    """A constraint of a field (``ge=0``, a pattern) in words; empty for metadata that constrains nothing."""
    bounds = {annotated_types.Ge: ("≥", "ge"), annotated_types.Gt: ("&gt;", "gt"), annotated_types.Le: ("≤", "le"),
              annotated_types.Lt: ("&lt;", "lt")}
    for kind, (sign, attribute) in bounds.items():
        if isinstance(meta, kind):
            return f"{sign} {_number(getattr(meta, attribute))}"
    if isinstance(meta, annotated_types.MinLen):
        return f"at least {meta.min_length} long"
    if isinstance(meta, annotated_types.MaxLen):
        return f"at most {meta.max_length} long"
    pattern = getattr(meta, "pattern", None)
    return f"matching {_code(pattern)}" if isinstance(pattern, str) else ""


def _number(value: Any) -> str:
    """``1048576.0`` as ``1048576``, ``0.5`` as ``0.5``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


@cache
def field_docstrings(model: type) -> dict[str, str]:
    """The attribute docstrings of ``model``'s fields (the string under each), inherited ones included."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if cls is not object and cls.__module__.partition(".")[0] != "pydantic":  # only the models' own classes
            docs.update(_own_docstrings(cls))
    return docs


def _own_docstrings(cls: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    docs: dict[str, str] = {}
    for statement, after in zip(body.body, body.body[1:], strict=False):
        if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[statement.target.id] = inspect.cleandoc(after.value.value)
    return docs


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
"""A Sphinx cross-reference (``:attr:`name```, ``:data:`~a.b.NAME```): the name alone reads in Markdown."""


def _markdown(doc: str) -> str:
    """A docstring as Markdown on one line: RST literals as code spans, paragraphs joined with ``<br>``."""
    doc = _ROLE.sub(lambda m: f"``{m.group(1).rsplit('.', 1)[-1]}``", doc)
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", doc.strip()) if p.strip()]
    return "<br><br>".join(_cell(p) for p in paragraphs)


def _cell(text: str) -> str:
    """One paragraph fit for a table cell: ``code`` as `code`, pipes escaped, a ``<`` outside code kept as text."""
    parts = re.split(r"``(.+?)``", text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(_code(part))
        else:
            out.append(part.replace("|", "\\|").replace("<", "&lt;"))
    return "".join(out)
