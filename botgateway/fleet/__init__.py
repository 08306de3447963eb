"""Several gateway processes on one Redis behaving as one bot: stops, approval decisions and conversation leases.

The contracts (:mod:`botgateway.fleet.base`) are what the gateway uses; the
Redis implementation (:mod:`botgateway.fleet.redis_fleet`, with the control
channel, the directory and the leases) is built by the composition root only
when ``memory.store`` is ``redis``. With SQLite there is one process and no
fleet: the gateway's own per-conversation line is the lease, and every stop
and decision is local.
"""

from __future__ import annotations

from botgateway.fleet.base import Ballot, Fleet, LocalControl, StopAnswer, StopTally

__all__ = ["Ballot", "Fleet", "LocalControl", "StopAnswer", "StopTally"]
