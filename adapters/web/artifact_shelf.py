"""The turns' pictures the web serves, kept a while in this process: bounded in bytes, each for its asker only.

A picture a tool drew (a chart) reaches the browser by URL, not inside the
card's JSON: the web sink and the OpenAI-compatible answer put it on the
:class:`ArtifactShelf`, and the console's ``/console/artifacts/<ref>.png`` and
the API's ``/v1/artifacts/<ref>.png`` serve it from there to whoever asked the
turn. The shelf forgets a picture :data:`KEEP_S` after it was kept, and drops
the least recently used ones first once all of them together pass
:data:`MAX_BYTES`. It is this process's memory: a fleet's other replicas (or
workers) do not have it, and answer such a link 404.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import TTLCache

from botgateway.artifacts import Artifact

__all__ = ["API_PICTURES", "CONSOLE_PICTURES", "KEEP_S", "MAX_BYTES", "ArtifactShelf", "KeptPicture",
           "picture_ref"]

KEEP_S = 24 * 3600.0
"""How long a picture is kept (and a signed link to it is valid): a client shows its chat history again later."""

MAX_BYTES = 64 * 1024 * 1024
"""What all the kept pictures may weigh together (a chart is some 50-100 kB per theme)."""

CONSOLE_PICTURES = "/console/artifacts/"
"""Where the console's pictures are served (``<ref>.png``), to the console session that asked the turn."""

API_PICTURES = "/v1/artifacts/"
"""Where the API's pictures are served (``<ref>.png``), to the key that asked the turn or a link it was given."""

_SUFFIX = ".png"


def picture_ref(name: str) -> str | None:
    """The reference in a served file name (``chart-9f2c….png``), or None when the name is no picture's."""
    ref = name.removesuffix(_SUFFIX)
    if ref == name or not ref or len(ref) > 100 or not all(c.isalnum() or c in "-_" for c in ref):
        return None
    return ref


@dataclass(frozen=True)
class KeptPicture:
    """A picture on the shelf, and whose it is."""

    artifact: Artifact
    """The picture (light, and dark when it was drawn)."""
    owner: str
    """The principal id of the turn's asker (``web:admin``, ``api:ops``): the only one it is served to."""

    def png(self, *, dark: bool = False) -> bytes:
        """The PNG to send: the dark one when asked for and drawn, else the light one."""
        return self.artifact.dark_png if dark and self.artifact.dark_png else self.artifact.png


def _weight(kept: KeptPicture) -> int:
    return len(kept.artifact.png) + len(kept.artifact.dark_png) + 512  # the entry itself costs something too


class ArtifactShelf:
    """The kept pictures, by reference."""

    def __init__(self, *, max_bytes: int = MAX_BYTES, keep_s: float = KEEP_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.keep_s = keep_s
        """How long a picture is kept."""
        self._kept: TTLCache[str, KeptPicture] = TTLCache(maxsize=max_bytes, ttl=keep_s, timer=clock,
                                                          getsizeof=_weight)

    def keep(self, artifact: Artifact, owner: str) -> bool:
        """Keep ``artifact`` for ``owner`` (again: its time starts over); False when it cannot be kept (larger than
        the whole shelf, or its reference already kept for someone else)."""
        known = self._kept.get(artifact.ref)
        if known is not None and known.owner != owner:
            return False
        kept = KeptPicture(artifact=artifact, owner=owner)
        if _weight(kept) > self._kept.maxsize:
            return False
        self._kept[artifact.ref] = kept
        return True

    def find(self, ref: str) -> KeptPicture | None:
        """The picture kept as ``ref``, while it is kept."""
        return self._kept.get(ref)

    def __len__(self) -> int:
        self._kept.expire()
        return len(self._kept)
