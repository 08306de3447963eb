"""The progressive card: what it shows, when it is updated, and how its final answer is never lost.

``state`` folds turn events into render data (:mod:`botgateway.snapshot`),
with ``round_text`` (the answer so far) and ``lifecycle`` (queued → ended);
``render`` and ``split`` give adapters the shared pieces of markup, ``policy``
and ``pacing`` decide when an update is due, ``caller`` makes each platform
call through the shared budget, ``parts`` and ``live`` track the card being
streamed, ``live_updates`` sends its updates, ``delivery`` and ``late_close``
deliver the final answer, ``records`` keeps open cards on record for
recovery, and ``streamer`` orchestrates them; ``factory`` builds a turn's card
from the config.
"""
