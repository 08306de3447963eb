"""Fakes of external services, for the tests and the benchmark (``make bench``).

They are real servers on loopback (aiohttp, ephemeral ports) that behave like
the platforms where it matters to the pipeline: rate limits, latency, error
answers. They live in the package, not under ``tests/``, so the benchmark can
use them without pytest or the ``tests`` package. The core never imports this
package at runtime.
"""
