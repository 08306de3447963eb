"""The control requests and answers as JSON: what crosses between processes, checked on the way in.

A process trusts its fleet (they share the store), but a malformed or
foreign message must never become a wrong decision: anything that does not
decode to the expected shape raises :class:`ValueError`, and the control
channel drops it with a log line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from botgateway.approvals import DeskAnswer
from botgateway.approvers import VoteResult
from botgateway.fleet.base import Ballot, StopAnswer, StopTally
from botgateway.principal import Principal

__all__ = [
    "ballot_from_wire",
    "ballot_to_wire",
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


def ballot_to_wire(ballot: Ballot) -> dict[str, Any]:
    """``ballot`` as JSON-ready data (the principal whole: the deciding process checks its roles)."""
    p = ballot.principal
    return {
        "code": ballot.code, "approved": ballot.approved, "locale": ballot.locale, "channel": ballot.channel,
        "token": ballot.token,
        "principal": {"id": p.id, "platform": p.platform, "user": p.user, "team": p.team, "external": p.external,
                      "groups": sorted(p.groups), "name": p.name},
    }


def ballot_from_wire(data: Mapping[str, Any]) -> Ballot:
    """The ballot :func:`ballot_to_wire` sent; raises ``ValueError`` when it is not one."""
    raw = data.get("principal")
    if not isinstance(raw, Mapping):
        raise ValueError("principal must be an object")
    groups = raw.get("groups")
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise ValueError("principal.groups must be a list of strings")
    principal = Principal(id=_text(raw, "id"), platform=_text(raw, "platform"), user=_text(raw, "user"),
                          team=_text(raw, "team"), external=_flag(raw, "external"), groups=frozenset(groups),
                          name=_text(raw, "name"))
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
    stopped, refused = data.get("stopped"), data.get("refused")
    if not isinstance(stopped, list) or not all(isinstance(t, str) for t in stopped):
        raise ValueError("stopped must be a list of turn ids")
    if not isinstance(refused, int) or isinstance(refused, bool) or refused < 0:
        raise ValueError("refused must be a count")
    return StopTally(tuple(stopped), refused)
