"""Shared test settings: every test runs against loopback services only."""

from __future__ import annotations

import os

# Tests must never pick up a developer's real credentials from the environment.
for _name in list(os.environ):
    if _name.startswith(("LLM_", "SLACK_", "DINGTALK_", "ALIBABA_CLOUD_", "TENCENTCLOUD_", "OPENAI_")):
        del os.environ[_name]
