"""The tool mechanism: what the model can call, and how calls are run safely.

A tool is anything that satisfies :class:`Tool` (:mod:`.contract`). Plain async
(or sync) functions become tools through :func:`tool` (:mod:`.function`), which
derives the JSON schema from type hints and the docstring with pydantic and
validates arguments before the function runs. :class:`ToolRegistry`
(:mod:`.registry`) runs calls with a timeout, a permission hook and a size cap,
and turns every failure into an error result the model can read and recover
from. Blocking functions run on the registry's own bounded pool of daemon
threads (:class:`SyncWorkers`, :mod:`.threads`) and are abandoned at their
timeout.

A tool may return data beside its text (:attr:`ToolOutput.data`): the model
reads the text, code reads the data. The registry remembers recent outcomes by
the text it sent the model (:class:`RecentOutcomes`), so a model running in
this process (the demo) reads the data behind a tool message without parsing
its text. What the model reads of a call is delimited and labelled with its
provenance (:mod:`.provenance`): tool results are data, never instructions,
and say where their data came from and how old it is (:class:`Source`).
"""

from botgateway.tooling.cache import TTLCache
from botgateway.tooling.contract import (
    PermissionHook,
    RecentOutcomes,
    Source,
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolError,
    ToolOutcome,
    ToolOutput,
    local_user,
    one_line,
)
from botgateway.tooling.function import FunctionTool, format_validation_error, tool
from botgateway.tooling.provenance import (
    DATA_NOT_INSTRUCTIONS,
    SOURCE_GATEWAY,
    SOURCE_TOOL,
    describe_sources,
    tool_result_body,
    wrap_tool_result,
)
from botgateway.tooling.registry import (
    DEFAULT_MAX_CALLS_PER_ROUND,
    RECENT_OUTCOMES,
    TRUNCATION_NOTE,
    ToolRegistry,
    allow_all,
    cap_text,
    parse_arguments,
)
from botgateway.tooling.threads import DEFAULT_SYNC_WORKERS, SyncWorkers

__all__ = [
    "DATA_NOT_INSTRUCTIONS",
    "DEFAULT_MAX_CALLS_PER_ROUND",
    "DEFAULT_SYNC_WORKERS",
    "RECENT_OUTCOMES",
    "SOURCE_GATEWAY",
    "SOURCE_TOOL",
    "TRUNCATION_NOTE",
    "FunctionTool",
    "PermissionHook",
    "RecentOutcomes",
    "Source",
    "SyncWorkers",
    "TTLCache",
    "Tool",
    "ToolArgumentError",
    "ToolContext",
    "ToolError",
    "ToolOutcome",
    "ToolOutput",
    "ToolRegistry",
    "allow_all",
    "cap_text",
    "describe_sources",
    "format_validation_error",
    "local_user",
    "one_line",
    "parse_arguments",
    "tool",
    "tool_result_body",
    "wrap_tool_result",
]
