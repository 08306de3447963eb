"""The tool mechanism: what the model can call, and how calls are run safely.

A tool is anything that satisfies :class:`Tool`. Plain async (or sync)
functions become tools through :func:`tool`, which derives the JSON schema from
type hints and the docstring with pydantic and validates arguments before the
function runs. :class:`ToolRegistry` runs calls with a timeout, a permission
hook and a size cap, and turns every failure into an error result the model can
read and recover from.
"""

from __future__ import annotations

import asyncio
import getpass
import inspect
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, get_type_hints, runtime_checkable

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ToolContext:
    """Who asked, and from where; tools and the permission hook use it."""

    user_id: str = ""
    """Platform user id of the asker (Slack user id, DingTalk staff id, local login)."""
    user_name: str = ""
    """Display name of the asker, when the platform gave one."""
    platform: str = "cli"
    """Adapter the question came from: ``slack``, ``dingtalk``, ``terminal``, ``cli``."""
    conversation_id: str = ""
    """Our conversation key (the memory scope)."""
    chat_id: str = ""
    """Platform chat/channel id."""
    is_group: bool = False
    """True in a group chat or channel, False in a direct chat."""
    roles: frozenset[str] = frozenset()
    """Roles granted by the gateway's access policy (for example ``admin``)."""


@dataclass(frozen=True)
class ToolOutput:
    """What a tool produced: text for the model and one line for the card."""

    content: str
    """What the model reads. Capped by the registry."""
    summary: str
    """One short line for the card's status line ("2 instances found")."""


class ToolError(Exception):
    """A failure the tool wants the model (and the card) to see in plain words."""


class ToolArgumentError(ToolError):
    """The model's arguments do not fit the tool's schema."""


@runtime_checkable
class Tool(Protocol):
    """Anything the model can call."""

    name: str
    """Unique name offered to the model (``[a-zA-Z0-9_-]{1,64}``)."""
    description: str
    """What the tool does, for the model."""
    parameters: Mapping[str, Any]
    """JSON schema of the arguments object."""
    timeout_s: float | None
    """Per-tool timeout; ``None`` uses the registry default."""

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run the tool. Raise :class:`ToolError` for a failure the model should see."""
        ...


def local_user() -> str:
    """The login name of whoever runs a command here (``cli`` where the system has none, as in some containers)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return "cli"


PermissionHook = Callable[[Tool, ToolContext], Awaitable[str | None]]
"""Returns ``None`` to allow the call, or the reason it is refused."""


@dataclass(frozen=True)
class ToolOutcome:
    """The result of one call as the loop sees it."""

    ok: bool
    """False on any failure (unknown tool, bad JSON, bad arguments, refusal, timeout, exception)."""
    content: str
    """Text sent back to the model as the tool result (an error note on failure)."""
    summary: str
    """One line for the card."""
    duration_s: float
    """Wall time in seconds."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """The parsed arguments (empty when they were not valid JSON)."""


# --- the @tool decorator -------------------------------------------------------

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


def _short(text: str, limit: int = 80) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


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


class TTLCache:
    """Values kept for ``ttl_s`` seconds, keyed on anything hashable (tool outputs, provider answers).

    A TTL of 0 or less caches nothing. When full, the entry closest to expiry makes room.
    """

    def __init__(self, ttl_s: float, *, max_entries: int = 256, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_s
        self._max = max_entries
        self._clock = clock
        self._data: dict[Any, tuple[float, Any]] = {}

    def get(self, key: Any) -> Any | None:
        """The live value for ``key``, or ``None``."""
        hit = self._data.get(key)
        if hit is None:
            return None
        expires, value = hit
        if expires < self._clock():
            del self._data[key]
            return None
        return value

    def put(self, key: Any, value: Any) -> None:
        """Remember ``value`` for the TTL (no-op when the TTL is 0)."""
        if self._ttl <= 0:
            return
        if len(self._data) >= self._max:
            del self._data[min(self._data, key=lambda k: self._data[k][0])]
        self._data[key] = (self._clock() + self._ttl, value)


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
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        doc_description, arg_docs = _parse_docstring(fn.__doc__ or "")
        self.description = description or doc_description or self.name
        self.timeout_s = timeout_s
        self._summarize = summarize
        self._cache = TTLCache(cache_ttl_s) if cache_ttl_s else None
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
        self.arguments_model: type[BaseModel] = create_model(  # type: ignore[call-overload]
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
        """Validate, consult the cache, run the function and normalize its output."""
        validated = self.validate(arguments)
        kwargs = {k: getattr(validated, k) for k in type(validated).model_fields}
        scope: dict[str, Any] = validated.model_dump(mode="json")
        if self._context_param:
            # A tool that looks at who asks may answer differently per asker: never serve one user's result to another.
            scope = {"args": scope, "asker": [ctx.platform, ctx.user_id, sorted(ctx.roles)]}
        key = json.dumps(scope, sort_keys=True, ensure_ascii=False)
        if self._cache is not None and (hit := self._cache.get(key)) is not None:
            return hit
        if self._context_param:
            kwargs[self._context_param] = ctx
        if inspect.iscoroutinefunction(self.fn):
            raw = await self.fn(**kwargs)
        else:
            raw = await asyncio.to_thread(self.fn, **kwargs)
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
        summary = self._summarize(raw) if self._summarize else _short(content)
        return ToolOutput(content=content, summary=summary)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (tests, composition)."""
        result = self.fn(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    cache_ttl_s: float | None = None,
    summarize: Callable[[Any], str] | None = None,
) -> Any:
    """Turn a function into a :class:`Tool`.

    The schema comes from the type hints, the description and per-argument
    help from a Google-style docstring (``Args:`` section). A parameter typed
    :class:`ToolContext` receives the caller's context and is hidden from the
    model. Return a ``str``, a :class:`ToolOutput`, an object with
    ``to_tool_output()``, or anything JSON-serializable.

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
        )

    return wrap(fn) if fn is not None else wrap


# --- the registry -------------------------------------------------------------

TRUNCATION_NOTE = "\n[output truncated: {omitted} of {total} characters omitted; narrow the query to see more]"


def cap_text(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters, saying so in a note the model can act on."""
    if len(text) <= limit:
        return text
    note = TRUNCATION_NOTE.format(omitted=len(text) - limit, total=len(text))
    return text[:limit] + note


async def allow_all(tool: Tool, ctx: ToolContext) -> str | None:
    """The default permission hook: every caller may use every tool."""
    return None


class ToolRegistry:
    """The set of tools offered to the model, and the safe way to run them."""

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        default_timeout_s: float = 30.0,
        max_result_chars: int = 8000,
        permission: PermissionHook = allow_all,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self.default_timeout_s = default_timeout_s
        self.max_result_chars = max_result_chars
        self.permission = permission
        for t in tools:
            self.add(t)

    def add(self, tool: Tool) -> None:
        """Offer ``tool`` to the model; a later tool of the same name replaces it."""
        self._tools[tool.name] = tool

    def remove(self, name: str) -> None:
        """Stop offering the tool called ``name`` (no error if absent)."""
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, if offered."""
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        """Names of the offered tools, in registration order."""
        return list(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        """The tools in the OpenAI ``tools`` request format."""
        return [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.parameters),
                },
            }
            for t in self._tools.values()
        ]

    async def execute(self, name: str, raw_arguments: str | Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Run one call. Never raises except on cancellation: failures become error outcomes."""
        started = time.monotonic()

        def failed(reason: str, arguments: dict[str, Any] | None = None) -> ToolOutcome:
            return ToolOutcome(
                ok=False,
                content=cap_text(f"Error: {reason}", self.max_result_chars),
                summary=_short(reason, 120),
                duration_s=time.monotonic() - started,
                arguments=arguments or {},
            )

        arguments: dict[str, Any]
        if isinstance(raw_arguments, Mapping):
            arguments = dict(raw_arguments)
        else:
            text = (raw_arguments or "").strip() or "{}"
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError as exc:
                return failed(f"arguments are not valid JSON ({exc.msg} at position {exc.pos}); send a JSON object")
            if not isinstance(parsed, dict):
                return failed("arguments must be a JSON object")
            arguments = parsed

        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return failed(f"unknown tool {name!r}; available tools: {known}", arguments)

        try:
            refusal = await self.permission(tool, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A broken policy must refuse, never allow, and never end the turn.
            log.error("tool.permission_check_failed", tool=name, error=type(exc).__name__, exc_info=True)
            return failed("not allowed: the permission check failed", arguments)
        if refusal is not None:
            return failed(f"not allowed: {refusal}", arguments)

        timeout = tool.timeout_s if tool.timeout_s is not None else self.default_timeout_s
        try:
            async with asyncio.timeout(timeout):
                output = await tool.invoke(arguments, ctx)
        except TimeoutError:
            return failed(f"timed out after {timeout:g} s", arguments)
        except ToolError as exc:
            return failed(str(exc) or type(exc).__name__, arguments)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool bug must not end the turn, but it must reach the log with its traceback
            log.error("tool.crashed", tool=name, error=type(exc).__name__, exc_info=True)
            return failed(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, arguments)

        return ToolOutcome(
            ok=True,
            content=cap_text(output.content, self.max_result_chars),
            summary=_short(output.summary, 120),
            duration_s=time.monotonic() - started,
            arguments=arguments,
        )
