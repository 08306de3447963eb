"""The card-pipeline benchmark (``make bench``).

N concurrent turns run through the real :class:`~botgateway.loop.ToolLoop` and
:class:`~botgateway.streaming.CardStreamer` against a scripted model and a
rate-limited fake card API on loopback, once per strategy (our buffer policy,
update on every chunk, no streaming), each in a fresh process. See
``bench/README.md`` for how to run it and what each number means.
"""
