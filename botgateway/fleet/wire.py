"""What crosses between processes as JSON (control requests and answers, moved questions), checked on the way in.

A process trusts its fleet (they share the store), but a malformed or
foreign message must never become a wrong decision: anything that does not
decode to the expected shape raises :class:`ValueError`, and the control
channel drops it with a log line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from botgateway.approvals import DeskAnswer, VoteResult
from botgateway.fleet.base import Ballot, StopAnswer, StopTally
from botgateway.fleet.handoff import MovedQuestion
from botgateway.grant import Grant, Limits, Scope
from botgateway.messages import InboundMessage
from botgateway.principal import Principal
from botgateway.sink import CardTarget, target_from_dict, target_to_dict
from botgateway.tooling import ToolContext

__all__ = [
    "ballot_from_wire",
    "ballot_to_wire",
    "moved_from_wire",
    "moved_to_wire",
    "principal_from_wire",
    "principal_to_wire",
    "stop_answer_from_wire",
    "tally_from_wire",
    "tally_to_wire",
    "vote_from_wire",
    "vote_to_wire",
]

_STOP_ANSWERS = frozenset(get_args(StopAnswer))
_DESK_ANSWERS = frozenset(get_args(DeskAnswer))


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value


def _optional_text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} must be a string or null")
    return value


def _flag(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key)
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false")
    return value


def _texts(data: Mapping[str, Any], key: str) -> list[str]:
    value = data.get(key)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{key} must be a list of strings")
    return value


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{key} must be a count")
    return value


def _number(data: Mapping[str, Any], key: str) -> float:
    value = data.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{key} must be a number")
    return float(value)


def _object(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    if not isinstance(value, Mapping):
        raise ValueError(f"{key} must be an object")
    return value


def principal_to_wire(principal: Principal) -> dict[str, Any]:
    """``principal`` whole, as JSON-ready data: the receiving process decides with its groups and its flag."""
    p = principal
    return {"id": p.id, "platform": p.platform, "user": p.user, "team": p.team, "external": p.external,
            "groups": sorted(p.groups), "name": p.name}


def principal_from_wire(data: Mapping[str, Any]) -> Principal:
    """The principal :func:`principal_to_wire` sent; raises ``ValueError`` when it is not one."""
    return Principal(id=_text(data, "id"), platform=_text(data, "platform"), user=_text(data, "user"),
                     team=_text(data, "team"), external=_flag(data, "external"),
                     groups=frozenset(_texts(data, "groups")), name=_text(data, "name"))


def ballot_to_wire(ballot: Ballot) -> dict[str, Any]:
    """``ballot`` as JSON-ready data (the principal whole: the deciding process checks its roles)."""
    return {
        "code": ballot.code, "approved": ballot.approved, "locale": ballot.locale, "channel": ballot.channel,
        "token": ballot.token, "principal": principal_to_wire(ballot.principal),
    }


def ballot_from_wire(data: Mapping[str, Any]) -> Ballot:
    """The ballot :func:`ballot_to_wire` sent; raises ``ValueError`` when it is not one."""
    principal = principal_from_wire(_object(data, "principal"))
    return Ballot(code=_text(data, "code"), principal=principal, approved=_flag(data, "approved"),
                  locale=_text(data, "locale"), channel=_optional_text(data, "channel"),
                  token=_optional_text(data, "token"))


def vote_to_wire(result: VoteResult) -> dict[str, Any]:
    """What became of a forwarded vote, for its sender."""
    return {"answer": result.answer, "note": result.note}


def vote_from_wire(data: Mapping[str, Any]) -> VoteResult:
    """The :class:`VoteResult` :func:`vote_to_wire` sent; raises ``ValueError`` when it is not one."""
    answer = _text(data, "answer")
    if answer not in _DESK_ANSWERS:
        raise ValueError(f"unknown vote answer {answer!r}")
    return VoteResult(answer, _text(data, "note"))  # type: ignore[arg-type]  # checked against DeskAnswer above


def stop_answer_from_wire(data: Mapping[str, Any]) -> StopAnswer:
    """The answer to a forwarded stop; raises ``ValueError`` when it is not one."""
    answer = _text(data, "answer")
    if answer not in _STOP_ANSWERS:
        raise ValueError(f"unknown stop answer {answer!r}")
    return answer  # type: ignore[return-value]  # checked against StopAnswer above


def tally_to_wire(tally: StopTally) -> dict[str, Any]:
    """What a forwarded "stop" did in one process."""
    return {"stopped": list(tally.stopped), "refused": tally.refused}


def tally_from_wire(data: Mapping[str, Any]) -> StopTally:
    """The tally :func:`tally_to_wire` sent; raises ``ValueError`` when it is not one."""
    return StopTally(tuple(_texts(data, "stopped")), _count(data, "refused"))


def moved_to_wire(moved: MovedQuestion) -> dict[str, Any]:
    """``moved`` as JSON-ready data: the question whole, as the receiving process must run it."""
    msg = moved.msg
    return {
        "turn_id": moved.turn_id, "moved_at": moved.moved_at, "moved_by": moved.moved_by,
        "message": {
            "platform": msg.platform, "message_id": msg.message_id, "conversation_id": msg.conversation_id,
            "text": msg.text, "target": target_to_dict(msg.target), "ctx": _ctx_to_wire(msg.ctx),
            "principal": principal_to_wire(msg.principal) if msg.principal is not None else None,
        },
    }


def moved_from_wire(data: Mapping[str, Any]) -> MovedQuestion:
    """The question :func:`moved_to_wire` sent; raises ``ValueError`` when it is not one."""
    raw = _object(data, "message")
    principal = raw.get("principal")
    msg = InboundMessage(
        platform=_text(raw, "platform"), message_id=_text(raw, "message_id"),
        conversation_id=_text(raw, "conversation_id"), text=_text(raw, "text"),
        target=_target_from_wire(_object(raw, "target")), ctx=_ctx_from_wire(_object(raw, "ctx")),
        principal=principal_from_wire(_object(raw, "principal")) if principal is not None else None,
    )
    return MovedQuestion(msg=msg, turn_id=_text(data, "turn_id"), moved_at=_number(data, "moved_at"),
                         moved_by=_text(data, "moved_by"))


_TARGET_TEXTS = ("platform", "chat_id", "turn_id", "user_id", "user_name", "locale", "workspace_id")


def _target_from_wire(data: Mapping[str, Any]) -> CardTarget:
    for key in _TARGET_TEXTS:
        _text(data, key)
    _optional_text(data, "thread_id")
    _flag(data, "is_group")
    _object(data, "extra")
    return target_from_dict(data)


def _ctx_to_wire(ctx: ToolContext) -> dict[str, Any]:
    return {
        "user_id": ctx.user_id, "user_name": ctx.user_name, "platform": ctx.platform,
        "conversation_id": ctx.conversation_id, "chat_id": ctx.chat_id, "is_group": ctx.is_group,
        "roles": sorted(ctx.roles),
        "principal": principal_to_wire(ctx.principal) if ctx.principal is not None else None,
        "grant": _grant_to_wire(ctx.grant) if ctx.grant is not None else None,
        "fresh": ctx.fresh,
    }


def _ctx_from_wire(data: Mapping[str, Any]) -> ToolContext:
    principal, grant = data.get("principal"), data.get("grant")
    return ToolContext(
        user_id=_text(data, "user_id"), user_name=_text(data, "user_name"), platform=_text(data, "platform"),
        conversation_id=_text(data, "conversation_id"), chat_id=_text(data, "chat_id"),
        is_group=_flag(data, "is_group"), roles=frozenset(_texts(data, "roles")),
        principal=principal_from_wire(_object(data, "principal")) if principal is not None else None,
        grant=_grant_from_wire(_object(data, "grant")) if grant is not None else None,
        fresh=data.get("fresh") is True,  # a Refresh moved to another process still bypasses the caches
    )


def _grant_to_wire(grant: Grant) -> dict[str, Any]:
    # The grant travels as decided: the question was admitted under it, as it was counted against its limits.
    limits = grant.limits
    return {
        "roles": list(grant.roles), "tools": sorted(grant.tools), "approval": sorted(grant.approval),
        "approver": grant.approver,
        "scopes": [{"provider": s.provider, "account": s.account, "region": s.region, "tags": dict(s.tags),
                    "metric_matchers": list(s.metric_matchers)} for s in grant.scopes],
        "limits": {"turns_per_minute": limits.turns_per_minute, "concurrent_turns": limits.concurrent_turns,
                   "tokens_per_day": limits.tokens_per_day},
    }


def _grant_from_wire(data: Mapping[str, Any]) -> Grant:
    scopes = data.get("scopes")
    if not isinstance(scopes, list) or not all(isinstance(scope, Mapping) for scope in scopes):
        raise ValueError("scopes must be a list of objects")
    limits = _object(data, "limits")
    return Grant(
        roles=tuple(_texts(data, "roles")), tools=frozenset(_texts(data, "tools")),
        approval=frozenset(_texts(data, "approval")), approver=_flag(data, "approver"),
        scopes=tuple(_scope_from_wire(scope) for scope in scopes),
        limits=Limits(turns_per_minute=_count(limits, "turns_per_minute"),
                      concurrent_turns=_count(limits, "concurrent_turns"),
                      tokens_per_day=_count(limits, "tokens_per_day")),
    )


def _scope_from_wire(data: Mapping[str, Any]) -> Scope:
    tags = _object(data, "tags")
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in tags.items()):
        raise ValueError("scope tags must map strings to strings")
    # A record from a process that predates metric matchers has none: its scope narrows no metric query, so
    # query_metrics refuses it rather than reading unscoped.
    matchers = tuple(_texts(data, "metric_matchers")) if "metric_matchers" in data else ()
    return Scope(provider=_text(data, "provider"), account=_text(data, "account"), region=_text(data, "region"),
                 tags=dict(tags), metric_matchers=matchers)
