"""Reading an API request's JSON body: size-limited (413), and malformed JSON answered 400 with the reason.

A field that is wrong is named as the error's ``param``. :class:`BadRequest` is
the API's error (:mod:`adapters.web.api_errors`), re-exported for the routes
that raise it.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from adapters.web.api_errors import BadRequest

__all__ = ["BadRequest", "read_json", "text_field"]


async def read_json(request: web.Request, max_bytes: int) -> dict[str, Any]:
    """The request's body as a JSON object; raises :class:`BadRequest` (413 past ``max_bytes``, else 400)."""
    if request.content_length is not None and request.content_length > max_bytes:
        raise BadRequest(f"the request body is larger than {max_bytes} bytes", 413)
    body = bytearray()
    while chunk := await request.content.read(64 * 1024):  # a chunked body has no length: count as it comes
        body += chunk
        if len(body) > max_bytes:
            raise BadRequest(f"the request body is larger than {max_bytes} bytes", 413)
    if not body.strip():
        raise BadRequest("the request body is empty; send a JSON object")
    try:
        data = json.loads(bytes(body).decode("utf-8"))
    except UnicodeDecodeError:
        raise BadRequest("the request body is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise BadRequest(f"the request body is not valid JSON: {exc.msg} at {where}") from None
    if not isinstance(data, dict):
        raise BadRequest(f"the request body must be a JSON object, not {type(data).__name__}")
    return data


def text_field(data: dict[str, Any], name: str, *, required: bool = False, max_chars: int = 200) -> str:
    """``data[name]`` as a string (empty when absent and not ``required``); raises :class:`BadRequest` otherwise."""
    value = data.get(name)
    if value is None or value == "":
        if required:
            raise BadRequest(f"'{name}' is required", param=name)
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"'{name}' must be a string, not {type(value).__name__}", param=name)
    if len(value) > max_chars:
        raise BadRequest(f"'{name}' is longer than {max_chars} characters", param=name)
    return value
