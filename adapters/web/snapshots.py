"""A :class:`~botgateway.snapshot.CardSnapshot` as JSON: what ``GET /v1/turns/{id}/card`` streams to the console.

Its model, tool and outside text goes out inert (:func:`~adapters.web.inert.inert_snapshot`).
Its pictures go out described, never as pixels: each names the URL the console
loads it from once it is kept (:meth:`~adapters.web.sink.WebSink.ship_artifact`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from adapters.web.artifact_shelf import CONSOLE_PICTURES
from adapters.web.inert import inert_snapshot
from botgateway.artifacts import ArtifactView
from botgateway.snapshot import CardSnapshot, Narration
from botgateway.strings import t

__all__ = ["artifact_to_dict", "snapshot_to_dict"]


def snapshot_to_dict(snapshot: CardSnapshot, turn_id: str = "") -> dict[str, Any]:
    """``snapshot``'s fields (text made inert) as plain JSON, each block tagged ``type`` (``narration`` or
    ``tool``), each picture as :func:`artifact_to_dict` describes it, plus ``final``.

    An approval prompt's ``token`` is kept: the console's buttons send it back with ``POST /v1/approvals/{code}``.
    """
    shown = inert_snapshot(snapshot)
    data = dataclasses.asdict(dataclasses.replace(shown, artifacts=()))  # no copy of the pixels
    data["blocks"] = [
        {"type": "narration" if isinstance(block, Narration) else "tool", **dataclasses.asdict(block)}
        for block in shown.blocks
    ]
    data["artifacts"] = [artifact_to_dict(view, snapshot.locale) for view in snapshot.artifacts]
    data["final"] = snapshot.final
    data["turn_id"] = turn_id
    return data


def artifact_to_dict(view: ArtifactView, locale: str = "en") -> dict[str, Any]:
    """One picture of the card: ``ref``, ``title``, ``alt`` (its figures in words), ``width``/``height``, ``state``
    (``pending``, ``shown``, ``failed``); once shown, ``url`` (and ``dark_url`` when a dark one was drawn) where the
    console loads it; once failed, ``error`` and ``note``, the card's one line about it."""
    artifact = view.artifact
    url = view.embed if view.state == "shown" and view.embed.startswith(CONSOLE_PICTURES) else ""
    title = " ".join(artifact.title.split())
    return {
        "ref": artifact.ref,
        "title": title,
        "alt": artifact.alt,
        "width": artifact.width,
        "height": artifact.height,
        "state": view.state,
        "url": url,
        "dark_url": f"{url}?theme=dark" if url and artifact.dark_png else "",
        "error": view.error,
        "note": t(locale, "chart_failed", title=title, reason=view.error) if view.state == "failed" else "",
    }
