"""A :class:`~botgateway.snapshot.CardSnapshot` as JSON: what ``GET /v1/turns/{id}/card`` streams to the console.

Its model, tool and outside text goes out inert (:func:`~adapters.web.inert.inert_snapshot`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from adapters.web.inert import inert_snapshot
from botgateway.snapshot import CardSnapshot, Narration

__all__ = ["snapshot_to_dict"]


def snapshot_to_dict(snapshot: CardSnapshot, turn_id: str = "") -> dict[str, Any]:
    """``snapshot``'s fields (text made inert) as plain JSON, each block tagged ``type`` (``narration`` or
    ``tool``), plus ``final``.

    An approval prompt's ``token`` is kept: the console's buttons send it back with ``POST /v1/approvals/{code}``.
    """
    shown = inert_snapshot(snapshot)
    data = dataclasses.asdict(shown)
    data["blocks"] = [
        {"type": "narration" if isinstance(block, Narration) else "tool", **dataclasses.asdict(block)}
        for block in shown.blocks
    ]
    data["final"] = snapshot.final
    data["turn_id"] = turn_id
    return data
