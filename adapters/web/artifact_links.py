"""The API answer's image links to a turn's pictures, signed so that only the key that asked can open them.

An OpenAI-compatible answer is Markdown: its pictures are image links,
``![title](<origin>/v1/artifacts/<ref>.png?sig=…)``, to the gateway. A client
that fetches them itself may send its key (``Authorization: Bearer``); a
browser client (Open WebUI) loads them with a plain ``<img>``, without headers,
so the link carries a signature instead: an HMAC of the reference and an
expiry, made with a secret derived from the asker's key
(:meth:`~adapters.web.auth.ApiKeys.derived_secret`). A link forged for another
reference, altered, or past its expiry opens nothing, and every link of a key
stops opening once that key is changed or removed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import re
import time
from collections.abc import Callable, Iterable

from adapters.web.artifact_shelf import API_PICTURES, ArtifactShelf, KeptPicture
from adapters.web.auth import ApiKeys
from botgateway.artifacts import Artifact
from botgateway.cards.pictures import MAX_PICTURES
from botgateway.principal import Principal
from botgateway.strings import t

__all__ = ["LINK_PURPOSE", "PictureLinks", "link_signature", "signature_ok"]

LINK_PURPOSE = b"botgateway/artifact-link/v1"
"""What the signing secret is derived for: a key's secret for links is no other secret of that key."""


def link_signature(secret: bytes, ref: str, expires_at: int) -> str:
    """The ``sig`` of a link to ``ref`` valid until ``expires_at`` (Unix time): ``<expires_at>.<HMAC, base64url>``."""
    mac = hmac.new(secret, f"{ref}\n{expires_at}".encode(), hashlib.sha256).digest()
    return f"{expires_at}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def signature_ok(secret: bytes, ref: str, sig: str, now: float) -> bool:
    """Whether ``sig`` was made by :func:`link_signature` with ``secret`` for ``ref`` and has not expired by ``now``."""
    expires, _, _ = sig.partition(".")
    if not expires.isdigit() or len(expires) > 12 or int(expires) < now:
        return False
    return hmac.compare_digest(link_signature(secret, ref, int(expires)).encode(), sig.encode())


def _label(title: str) -> str:
    """``title`` as an image's text in Markdown: one line, its brackets and backslashes escaped."""
    return re.sub(r"([\\\[\]])", r"\\\1", " ".join(title.split()))


class PictureLinks:
    """Keeps an API turn's pictures on the shelf for its asker, and writes the answer's links to them."""

    def __init__(self, shelf: ArtifactShelf, keys: ApiKeys, *, clock: Callable[[], float] = time.time) -> None:
        """``clock``: the wall clock a link's expiry is counted on."""
        self._shelf = shelf
        self._keys = keys
        self._clock = clock

    def markdown(self, artifacts: Iterable[Artifact], asker: Principal, origin: str, locale: str) -> str:
        """An image link per picture (the first :data:`MAX_PICTURES` distinct ones), each on its own paragraph;
        a picture that cannot be kept gets a line saying so instead. Empty without pictures."""
        secret = self._keys.derived_secret(asker.id, LINK_PURPOSE)
        expires = math.floor(self._clock() + self._shelf.keep_s)
        lines: list[str] = []
        seen: set[str] = set()
        for artifact in artifacts:
            if artifact.ref in seen or len(seen) >= MAX_PICTURES:
                continue
            seen.add(artifact.ref)
            if not self._shelf.keep(artifact, asker.id):
                lines.append(t(locale, "chart_failed", title=" ".join(artifact.title.split()),
                               reason=t(locale, "chart_internal")))
                continue
            url = f"{origin}{API_PICTURES}{artifact.ref}.png"
            if secret is not None:  # a console session has no key to sign with: its cookie opens the link
                url += f"?sig={link_signature(secret, artifact.ref, expires)}"
            lines.append(f"![{_label(artifact.title)}]({url})")
        return "\n\n".join(lines)

    def signed(self, kept: KeptPicture, sig: str) -> bool:
        """Whether ``sig`` opens ``kept``: signed with the secret of its asker's key as configured now."""
        secret = self._keys.derived_secret(kept.owner, LINK_PURPOSE)
        return secret is not None and signature_ok(secret, kept.artifact.ref, sig, self._clock())
