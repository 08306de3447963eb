"""JSON encoding of stored records, shared by every back-end.

Both back-ends keep the same JSON shape, so a dump of one can be read by the
other and a record written by an older release stays readable (unknown keys
are ignored, missing ones take their defaults).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from botgateway.stores.base import AuditRecord, FeedbackRecord, OpenCard, StoredTurn, ToolCallRow

__all__ = [
    "audit_from_dict",
    "audit_to_dict",
    "decode_card",
    "decode_feedback",
    "decode_tool_call",
    "decode_turn",
    "dumps",
    "encode_card",
    "encode_feedback",
    "encode_tool_call",
    "encode_turn",
]


def dumps(value: Any) -> str:
    """Compact JSON that keeps CJK text readable (and smaller) in the database."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def encode_turn(turn: StoredTurn) -> str:
    """One turn as a JSON object."""
    return dumps(
        {
            "turn_id": turn.turn_id,
            "messages": list(turn.messages),
            "created_at": turn.created_at,
            "is_summary": turn.is_summary,
        }
    )


def decode_turn(text: str | bytes) -> StoredTurn:
    """The inverse of :func:`encode_turn`."""
    data = json.loads(text)
    return StoredTurn(
        turn_id=str(data["turn_id"]),
        messages=tuple(data.get("messages") or ()),
        created_at=float(data.get("created_at") or 0.0),
        is_summary=bool(data.get("is_summary", False)),
    )


def encode_card(card: OpenCard) -> str:
    """One open card as a JSON object."""
    return dumps(
        {
            "platform": card.platform,
            "card_id": card.card_id,
            "turn_id": card.turn_id,
            "target": dict(card.target),
            "created_at": card.created_at,
            "owner": card.owner,
            **({"resume": dict(card.resume)} if card.resume else {}),
        }
    )


def decode_card(text: str | bytes) -> OpenCard:
    """The inverse of :func:`encode_card`."""
    data = json.loads(text)
    return OpenCard(
        platform=str(data["platform"]),
        card_id=str(data["card_id"]),
        turn_id=str(data.get("turn_id", "")),
        target=data.get("target") or {},
        created_at=float(data.get("created_at") or 0.0),
        owner=str(data.get("owner") or ""),
        resume=resume if isinstance(resume := data.get("resume"), dict) else {},
    )


def audit_to_dict(record: AuditRecord) -> dict[str, Any]:
    """A JSON-ready dict of an audit record."""
    data = asdict(record)
    data["tool_calls"] = [dict(call) for call in record.tool_calls]
    data["extra"] = dict(record.extra)
    return data


def audit_from_dict(data: Mapping[str, Any]) -> AuditRecord:
    """The inverse of :func:`audit_to_dict`; unknown keys are ignored."""
    known = AuditRecord.__dataclass_fields__
    values = {key: value for key, value in data.items() if key in known}
    values["tool_calls"] = tuple(values.get("tool_calls") or ())
    values["extra"] = dict(values.get("extra") or {})
    return AuditRecord(**values)


def encode_tool_call(row: ToolCallRow) -> str:
    """One tool-call row as a JSON object."""
    data = asdict(row)
    data["arguments"] = dict(row.arguments)
    return dumps(data)


def decode_tool_call(text: str | bytes) -> ToolCallRow:
    """The inverse of :func:`encode_tool_call`; unknown keys are ignored."""
    data = json.loads(text)
    known = ToolCallRow.__dataclass_fields__
    values = {key: value for key, value in data.items() if key in known}
    values["arguments"] = dict(values.get("arguments") or {})
    return ToolCallRow(**values)


def encode_feedback(record: FeedbackRecord) -> str:
    """One vote as a JSON object."""
    data = asdict(record)
    data["tools"] = list(record.tools)
    data["sources"] = [dict(source) for source in record.sources]
    return dumps(data)


def decode_feedback(text: str | bytes) -> FeedbackRecord:
    """The inverse of :func:`encode_feedback`; unknown keys are ignored."""
    data = json.loads(text)
    known = FeedbackRecord.__dataclass_fields__
    values = {key: value for key, value in data.items() if key in known}
    values["tools"] = tuple(str(name) for name in values.get("tools") or ())
    values["sources"] = tuple(dict(s) for s in values.get("sources") or () if isinstance(s, Mapping))
    values["vote"] = "down" if values.get("vote") == "down" else "up"
    return FeedbackRecord(**values)
