"""The pictures of one card: the turn's artifacts in the order they came, each with where its delivery is."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from botgateway.artifacts import Artifact, ArtifactPlacement, ArtifactView

__all__ = ["MAX_PICTURES", "CardPictures"]

MAX_PICTURES = 4
"""Pictures one card carries at most: a turn that draws more shows the first ones (each is an upload)."""


class CardPictures:
    """The artifacts a card shows, by reference; a repeated reference is kept once."""

    def __init__(self) -> None:
        self._views: dict[str, ArtifactView] = {}
        self.left_out = 0
        """Pictures past :data:`MAX_PICTURES`, never delivered."""

    @property
    def views(self) -> tuple[ArtifactView, ...]:
        """Every picture, in the order it came."""
        return tuple(self._views.values())

    @property
    def pending(self) -> tuple[Artifact, ...]:
        """The pictures still being delivered."""
        return tuple(v.artifact for v in self._views.values() if v.state == "pending")

    def add(self, artifacts: Iterable[Artifact]) -> list[Artifact]:
        """Take the pictures of a finished call; returns those that are new and fit (to be delivered)."""
        new: list[Artifact] = []
        for artifact in artifacts:
            if artifact.ref in self._views:
                continue
            if len(self._views) >= MAX_PICTURES:
                self.left_out += 1
                continue
            self._views[artifact.ref] = ArtifactView(artifact=artifact)
            new.append(artifact)
        return new

    def placed(self, ref: str, placement: ArtifactPlacement) -> bool:
        """``ref`` was delivered; False when it is unknown or already settled."""
        view = self._views.get(ref)
        if view is None or view.state != "pending":
            return False
        self._views[ref] = replace(view, state="shown", embed=placement.embed)
        return True

    def failed(self, ref: str, error: str) -> bool:
        """``ref`` could not be delivered (``error``: why, in one line); False when unknown or already settled."""
        view = self._views.get(ref)
        if view is None or view.state != "pending":
            return False
        self._views[ref] = replace(view, state="failed", error=error)
        return True
