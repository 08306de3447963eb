"""Slack user groups a principal belongs to, so a role may list ``slack:S0ONCALL`` as a member.

One ``usergroups.users.list`` call per group the policy names (never per asker),
cached for ``access.group_cache_s``; concurrent askers share one call. The app
needs the ``usergroups:read`` bot scope; without it (or when Slack throttles or
cannot be reached) the group counts as empty for a short while and the log says
what to fix, so the asker keeps only what their own id grants.

Anyone Slack sends us is resolved, Slack Connect users included: a user group
of the installing workspace only holds people an admin put there, and the
policy decides separately what an external asker may hold.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.errors import classify, slack_error_code
from botgateway.access import SLACK_GROUP_PREFIX, CachedLookup, GroupLookupFailed
from botgateway.principal import Principal
from botgateway.sink import RateLimited, TransientError

__all__ = ["SlackUserGroups"]

_ADVICE = {
    "missing_scope": "add the usergroups:read bot scope to the Slack app and reinstall it",
    "no_such_subteam": "no such user group in this workspace: fix the slack:S… id under access.roles.*.members",
    "not_allowed_token_type": "usergroups.users.list needs the bot token (xoxb-) with the usergroups:read scope",
}


class SlackUserGroups:
    """Resolves the Slack user groups the policy names (``slack:S…``), through ``usergroups.users.list``."""

    def __init__(self, client: AsyncWebClient, groups: frozenset[str], ttl_s: float, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``groups``: the qualified group ids to resolve (see :func:`botgateway.access.groups.policy_groups`);
        ``ttl_s``: how long a group's members are trusted before they are listed again."""
        self.groups = frozenset(g for g in groups if g.startswith(SLACK_GROUP_PREFIX))
        """The qualified ids of the groups looked up."""
        self._client = client
        self._members: CachedLookup[str] = CachedLookup(self._list_members, ttl_s=ttl_s, what="slack usergroup",
                                                         clock=clock)

    async def resolve(self, principal: Principal) -> Principal:
        """``principal`` with every configured group that lists it; unchanged for other platforms. Never raises."""
        if principal.platform != "slack" or not principal.user or not self.groups:
            return principal
        ordered = sorted(self.groups)
        members = await asyncio.gather(*(self._members.get(g) for g in ordered))
        found = frozenset(g for g, users in zip(ordered, members, strict=True) if principal.user in users)
        return principal.with_groups(found) if found else principal

    async def _list_members(self, group: str) -> frozenset[str]:
        usergroup = group.removeprefix("slack:")
        try:
            answer = await self._client.usergroups_users_list(usergroup=usergroup)
        except Exception as exc:
            raise _failure(exc) from None
        users = answer.get("users")
        return frozenset(str(u) for u in users) if isinstance(users, list) else frozenset()


def _failure(exc: Exception) -> GroupLookupFailed:
    """What a failed ``usergroups.users.list`` means, with what to fix (the shared mapping tells throttles apart)."""
    code = slack_error_code(exc)
    error = classify(exc)
    if isinstance(error, RateLimited):
        return GroupLookupFailed("slack throttled usergroups.users.list; the group is listed again after the wait",
                                 reason="ratelimited", retry_after_s=error.retry_after)
    if isinstance(error, TransientError):
        return GroupLookupFailed(f"could not list the user group ({error}); it is tried again shortly",
                                 reason=code or "unreachable")
    advice = _ADVICE.get(code, f"slack refused usergroups.users.list ({code or error})")
    return GroupLookupFailed(advice, reason=code or "refused")
