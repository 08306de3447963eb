"""The end-to-end benchmark (``make bench``).

N mentions are pushed by a fake Slack (Socket Mode) or fake DingTalk (Stream
mode) with the platforms' rate limits, through the real adapters and Gateway
(built as ``botgateway run`` builds them, in a worker process) to a scripted
model; the bench measures, per answer, when its text became visible on the
fake platform and when the complete exact answer was. See ``bench/README.md``.
"""
