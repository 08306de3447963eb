"""DingTalk departments a principal belongs to, so a role may list ``dingtalk:dept:42`` as a member.

Active only when the policy names a ``dingtalk:dept:`` group. One contact API
call per asker (``POST {oapi}/topapi/v2/user/get`` with the staff id), cached
for ``access.group_cache_s``; its ``dept_id_list`` are the asker's *direct*
departments (a role naming a parent department does not reach its
sub-departments). The call uses the adapter's own
:class:`~adapters.dingtalk.openapi.DingTalkOpenAPI` token and session: the app's
access token serves the old API (``oapi.dingtalk.com``, token in the query) as
well as the new one.

The app needs the contact permission 成员信息读权限 (``qyapi_get_member``) and
the asker inside its contact range. Without it every lookup answers "no
departments": the asker keeps only what their own id grants, and the log says
which permission to add.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from adapters.dingtalk.openapi import DingTalkOpenAPI
from botgateway.access import DINGTALK_DEPT_PREFIX, CachedLookup, GroupLookupFailed
from botgateway.principal import Principal
from botgateway.sink import RateLimited, SinkError

__all__ = ["CONTACT_PERMISSION", "DingTalkDepartments"]

CONTACT_PERMISSION = "成员信息读权限 (qyapi_get_member)"
"""The app permission ``topapi/v2/user/get`` needs, as DingTalk's developer console names it."""

_NO_PERMISSION = "60011"
"""DingTalk's code for "the app has not been granted the permission" (``errcode``, or ``sub_code`` of errcode 88)."""
_BAD_TOKEN = frozenset({40014, 42001})
"""``errcode`` of an invalid or expired access token: refreshed once, like a 401 of the new API."""
_NO_SUCH_USER = frozenset({60121, 60003})
"""``errcode`` of an unknown user (left the organisation): simply no departments."""
_TIMEOUT = aiohttp.ClientTimeout(total=10)
"""A lookup delays a question: it must not hang on a slow contact API."""


class DingTalkDepartments:
    """Resolves the departments the policy names (``dingtalk:dept:<id>``) through the contact API."""

    def __init__(self, api: DingTalkOpenAPI, groups: frozenset[str], ttl_s: float, *,
                 oapi_base_url: str = "https://oapi.dingtalk.com",
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``api``: the adapter's OpenAPI client (its token and session); ``groups``: the qualified department ids
        the policy names; ``ttl_s``: how long an asker's departments are trusted before they are fetched again."""
        self.groups = frozenset(g for g in groups if g.startswith(DINGTALK_DEPT_PREFIX))
        """The qualified ids of the departments that matter."""
        self._api = api
        self._url = oapi_base_url.rstrip("/") + "/topapi/v2/user/get"
        self._departments: CachedLookup[str] = CachedLookup(self._fetch, ttl_s=ttl_s, what="dingtalk departments",
                                                             clock=clock)

    async def resolve(self, principal: Principal) -> Principal:
        """``principal`` with the configured departments it is directly in; unchanged for other platforms,
        users of other organisations and senders without a staff id. Never raises."""
        if principal.platform != "dingtalk" or principal.external or not self.groups:
            return principal
        if not principal.user or principal.user.startswith("$:"):
            return principal  # an opaque senderId, not a staff id: the contact API does not know it
        found = await self._departments.get(principal.user) & self.groups
        return principal.with_groups(found) if found else principal

    async def _fetch(self, staff_id: str) -> frozenset[str]:
        for attempt in (1, 2):
            token = await self._token()
            payload = await self._post(token, staff_id)
            errcode = _int(payload.get("errcode"))
            if errcode in _BAD_TOKEN and attempt == 1:
                self._api.invalidate_token(token)
                continue
            if errcode in _NO_SUCH_USER:
                return frozenset()
            if errcode:
                raise _failure(errcode, payload)
            result = payload.get("result")
            depts = result.get("dept_id_list") if isinstance(result, Mapping) else None
            return frozenset(f"{DINGTALK_DEPT_PREFIX}{d}" for d in depts or () if isinstance(d, int | str))
        raise GroupLookupFailed("a fresh access token was refused too; check client_id and client_secret",
                                reason="token", once_per="token")

    async def _token(self) -> str:
        try:
            return await self._api.access_token()
        except SinkError as exc:
            retry = exc.retry_after if isinstance(exc, RateLimited) else None
            raise GroupLookupFailed(f"no access token: {exc}", reason="token", retry_after_s=retry,
                                    once_per="token") from None

    async def _post(self, token: str, staff_id: str) -> Mapping[str, Any]:
        body = json.dumps({"userid": staff_id, "language": "zh_CN"}).encode()
        try:
            async with self._api.session().post(self._url, params={"access_token": token}, data=body,
                                                headers={"Content-Type": "application/json"}, timeout=_TIMEOUT) as resp:
                text = await resp.text()
                status = resp.status
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise GroupLookupFailed(f"the contact API could not be reached ({type(exc).__name__})",
                                    reason="unreachable", once_per="unreachable") from None
        try:
            payload = json.loads(text) if text else {}
        except json.JSONDecodeError:
            payload = None
        if status != 200 or not isinstance(payload, Mapping):
            raise GroupLookupFailed(f"the contact API answered HTTP {status}", reason=f"http_{status}",
                                    once_per=f"http_{status}")
        return payload


def _failure(errcode: int, payload: Mapping[str, Any]) -> GroupLookupFailed:
    """What a non-zero ``errcode`` of ``topapi/v2/user/get`` means, with what to fix."""
    sub_code = str(payload.get("sub_code") or "")
    message = str(payload.get("errmsg") or payload.get("sub_msg") or "")[:200]
    if str(errcode) == _NO_PERMISSION or sub_code == _NO_PERMISSION or "qyapi_get_member" in message:
        return GroupLookupFailed(
            f"the DingTalk app lacks the contact permission {CONTACT_PERMISSION}: add it in the developer "
            "console (权限管理) and make the askers part of the app's contact range",
            reason="no_permission", once_per="no_permission")
    return GroupLookupFailed(f"the contact API refused the lookup (errcode {errcode} {sub_code} {message})".strip(),
                             reason=f"errcode_{errcode}", once_per=f"errcode_{errcode}")


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0
