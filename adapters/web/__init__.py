"""The web front door: the HTTP API (``/v1/…``, Server-Sent Events and an OpenAI-compatible endpoint) and the console.

:mod:`.adapter` is the adapter ``run`` starts; :mod:`.app` the ``/v1``
sub-application; :mod:`.routes`, :mod:`.openai_compat` and :mod:`.models_route`
its handlers; :mod:`.api_errors` its one error shape (OpenAI's);
:mod:`.client_history` an OpenAI client's earlier messages as history;
:mod:`.front` what they share (the question as the gateway takes it, the
caller's grant, each turn's owner); :mod:`.follow` and :mod:`.tap` one turn's
events streamed to one client; :mod:`.sink` the cards (each turn's newest
snapshot); :mod:`.auth`, :mod:`.cors`, :mod:`.body`, :mod:`.sse`,
:mod:`.client_addr` and :mod:`.public_url` the HTTP details; :mod:`.session`
the console's login, as the API asks it; :mod:`.artifact_shelf`,
:mod:`.artifact_links` and :mod:`.artifact_routes` the turns' pictures, kept
and served to their askers.
"""

from __future__ import annotations

from adapters.web.adapter import WebAdapter
from adapters.web.sink import PLATFORM, WebSink

__all__ = ["PLATFORM", "WebAdapter", "WebSink"]
