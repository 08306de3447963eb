"""The ``@tool`` decorator: a Python function becomes a :class:`~botgateway.tooling.contract.Tool`.

The JSON schema comes from the type hints and the per-argument help from a
Google-style docstring, both through pydantic, which also validates the
model's arguments before the function runs.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from botgateway.tooling.cache import TTLCache
from botgateway.tooling.contract import ToolArgumentError, ToolContext, ToolOutput, one_line
from botgateway.tooling.threads import run_blocking

__all__ = ["FunctionTool", "format_validation_error", "tool"]


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$", re.IGNORECASE)
_OTHER_HEADER = re.compile(
    r"^(Returns?|Yields?|Raises|Examples?|Notes?|Warnings?|See Also|References|Todo|Attributes):\s*$", re.IGNORECASE
)
_ARG_LINE = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and per-argument text.

    Other sections (``Returns:``, ``Raises:``, ``Examples:``…) are for the
    programmer, not the model, and are left out of both.
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    in_other = False
    current: str | None = None
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args, in_other = True, False
            continue
        if _OTHER_HEADER.match(line):
            in_args, in_other = False, True
            continue
        if in_other:
            continue
        if in_args:
            if line and not line.startswith((" ", "\t")) and line.rstrip().endswith(":"):
                in_args, in_other = False, True  # a section we do not know by name
                continue
            match = _ARG_LINE.match(line)
            if match and (line.startswith((" ", "\t")) or current is None or not line.strip()):
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif current and line.strip():
                params[current] += " " + line.strip()
            continue
        description.append(line)
    return "\n".join(description).strip(), params


def format_validation_error(error: ValidationError) -> str:
    """A compact, model- and human-readable description of pydantic errors."""
    parts = []
    for item in error.errors():
        loc = ".".join(str(p) for p in item.get("loc", ())) or "arguments"
        msg = item.get("msg", "invalid")
        if item.get("type") == "missing":
            msg = "required"
        elif item.get("type") == "extra_forbidden":
            msg = "unknown argument"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


class FunctionTool:
    """A :class:`Tool` made from a Python function by :func:`tool`."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = None,
        cache_ttl_s: float | None = None,
        summarize: Callable[[Any], str] | None = None,
        read_only: bool = False,
        cache_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        doc_description, arg_docs = _parse_docstring(fn.__doc__ or "")
        self.description = description or doc_description or self.name
        self.timeout_s = timeout_s
        self.read_only = read_only
        """Only looks things up, changes nothing (see :class:`~botgateway.tooling.contract.Tool`)."""
        self._summarize = summarize
        self._cache = TTLCache(cache_ttl_s, clock=cache_clock) if cache_ttl_s else None
        self._context_param: str | None = None

        hints = get_type_hints(fn, include_extras=True)
        fields: dict[str, Any] = {}
        for pname, param in inspect.signature(fn).parameters.items():
            annotation = hints.get(pname, Any)
            if annotation is ToolContext:
                self._context_param = pname
                continue
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[pname] = (annotation, Field(default, description=arg_docs.get(pname)))
        self.arguments_model: type[BaseModel] = create_model(
            f"{self.name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
        schema = self.arguments_model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        self.parameters: Mapping[str, Any] = schema

    def validate(self, arguments: Mapping[str, Any]) -> BaseModel:
        """Validate raw arguments; raises :class:`ToolArgumentError` with a readable message."""
        try:
            return self.arguments_model.model_validate(dict(arguments))
        except ValidationError as exc:
            raise ToolArgumentError(f"invalid arguments: {format_validation_error(exc)}") from None

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Validate, consult the cache, run the function and normalize its output.

        An output served from the cache says so in its sources (each keeps the
        time its data was fetched); ``ctx.fresh`` skips the cache and stores the new output.
        """
        validated = self.validate(arguments)
        kwargs = {k: getattr(validated, k) for k in type(validated).model_fields}
        scope: dict[str, Any] = validated.model_dump(mode="json")
        if self._context_param:
            # A tool that looks at who asks may answer differently per asker: never serve one user's result to another.
            scope = {"args": scope, "asker": [ctx.platform, ctx.user_id, sorted(ctx.roles)]}
        key = json.dumps(scope, sort_keys=True, ensure_ascii=False)
        if self._cache is not None and not ctx.fresh and (hit := self._cache.get(key)) is not None:
            return _served_from_cache(hit)
        if self._context_param:
            kwargs[self._context_param] = ctx
        if inspect.iscoroutinefunction(self.fn):
            raw = await self.fn(**kwargs)
        else:
            raw = await run_blocking(functools.partial(self.fn, **kwargs))
        output = self._normalize(raw)
        if self._cache is not None:
            self._cache.put(key, output)
        return output

    def _normalize(self, raw: Any) -> ToolOutput:
        if isinstance(raw, ToolOutput):
            return raw
        if hasattr(raw, "to_tool_output"):
            return raw.to_tool_output()
        if isinstance(raw, str):
            content = raw
        else:
            content = json.dumps(raw, ensure_ascii=False, default=str)
        summary = self._summarize(raw) if self._summarize else one_line(content)
        return ToolOutput(content=content, summary=summary)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (tests, composition)."""
        result = self.fn(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result


def _served_from_cache(output: ToolOutput) -> ToolOutput:
    """``output`` as a cache hit: every source marked cached, its fetch time kept (so its age shows)."""
    if not output.sources:
        return output
    return replace(output, sources=tuple(replace(source, cached=True) for source in output.sources))


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    cache_ttl_s: float | None = None,
    summarize: Callable[[Any], str] | None = None,
    read_only: bool = False,
    cache_clock: Callable[[], float] = time.monotonic,
) -> Any:
    """Turn a function into a :class:`Tool`.

    The schema comes from the type hints, the description and per-argument
    help from a Google-style docstring (``Args:`` section). A parameter typed
    :class:`ToolContext` receives the caller's context and is hidden from the
    model. Return a ``str``, a :class:`ToolOutput` (its rendering plus the
    data behind it), an object with ``to_tool_output()`` (a structured result
    that renders itself), or anything JSON-serializable (sent as JSON text).

    ``read_only``: the function only looks things up and changes nothing; an
    unattended turn (an alert's investigation) is offered only such tools.

    ``cache_clock``: the clock the ``cache_ttl_s`` cache expires on (seconds; a test moves its own).

    Usable bare (``@tool``) or with options (``@tool(timeout_s=5, cache_ttl_s=60)``).
    """

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f,
            name=name,
            description=description,
            timeout_s=timeout_s,
            cache_ttl_s=cache_ttl_s,
            summarize=summarize,
            read_only=read_only,
            cache_clock=cache_clock,
        )

    return wrap(fn) if fn is not None else wrap
