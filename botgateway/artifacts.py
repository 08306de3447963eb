"""A picture a tool made for the turn (a chart drawn on the server), and how its card shows it.

A tool returns :class:`Artifact` values beside its text (``ToolOutput.artifacts``);
they travel with the turn's events to every consumer. The card lists the turn's
artifacts in its snapshot as :class:`ArtifactView` values, and each sink delivers
them its own way (:class:`~botgateway.sink.ArtifactSink`): an upload into the
answer's thread, a ``media_id`` in the card's markdown, an inline image, a link,
a sparkline. The model never sees the picture: it reads the tool's summary and
refers to the picture by :attr:`Artifact.ref`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

__all__ = ["Artifact", "ArtifactPlacement", "ArtifactState", "ArtifactView", "new_ref"]


def new_ref(prefix: str = "chart") -> str:
    """A fresh reference for an artifact: short for the model, unguessable for a link that serves it."""
    return f"{prefix}-{secrets.token_hex(8)}"


@dataclass(frozen=True, kw_only=True)
class Artifact:
    """One picture of the turn: a PNG, and what stands in for it where no picture can be shown."""

    ref: str
    """Its reference (``chart-9f2c…``): what the tool told the model, and the name a link serves it under."""
    title: str
    """What it shows, in a line ("CPU of prod-db-01, last 1h")."""
    png: bytes = field(repr=False)
    """The picture, light theme."""
    width: int
    """Width of :attr:`png` in pixels."""
    height: int
    """Height of :attr:`png` in pixels."""
    alt: str = ""
    """The figures it shows, in words (a screen reader's text, and the line shown where the picture cannot be)."""
    sparkline: str = ""
    """The shape of its main series in block characters (``▁▂▄▇█▆``), for a terminal; empty for a bar chart."""
    dark_png: bytes = field(default=b"", repr=False)
    """The same picture in the dark theme, for a front door that has one; empty when only the light one was drawn."""
    filename: str = ""
    """A file name for an upload (``cpu-prod-db-01.png``); :attr:`ref` plus ``.png`` when empty."""

    @property
    def file_name(self) -> str:
        """The name an upload carries."""
        return self.filename or f"{self.ref}.png"

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description without the pixels (for ``ask --json``, logs and event streams)."""
        return {"ref": self.ref, "title": self.title, "width": self.width, "height": self.height, "alt": self.alt,
                "sparkline": self.sparkline, "bytes": len(self.png)}


ArtifactState: TypeAlias = Literal["pending", "shown", "failed"]
"""Being delivered; delivered (in the card or beside it); could not be delivered."""


@dataclass(frozen=True, kw_only=True)
class ArtifactPlacement:
    """Where a sink put an artifact: what the card must show for it, if anything."""

    embed: str = ""
    """Markup the card shows in its own body (a DingTalk ``![title](@mediaId)``, a console image's URL); empty when
    the picture lives beside the card (a file in the answer's Slack thread, an image message under the card)."""


@dataclass(frozen=True, kw_only=True)
class ArtifactView:
    """An artifact as the card shows it at one moment."""

    artifact: Artifact
    """The picture."""
    state: ArtifactState = "pending"
    """Where its delivery is."""
    embed: str = ""
    """What the card shows for it in its body (:attr:`ArtifactPlacement.embed`) once shown; empty otherwise."""
    error: str = ""
    """Why it could not be delivered, in one line, when ``failed``."""
