"""A process's own numbers: CPU seconds used, resident memory now and at its peak, the CPUs it may run on."""

from __future__ import annotations

import os
import resource
import sys

__all__ = ["cpu_s", "peak_rss_bytes", "rss_bytes", "usable_cpus"]


def cpu_s() -> float:
    """User + system CPU seconds this process has used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_bytes() -> int:
    """Resident memory now."""
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:  # psutil is in the bench extra; fall back to /proc
        with open(f"/proc/{os.getpid()}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """The most resident memory this process has had."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB, macOS bytes


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
