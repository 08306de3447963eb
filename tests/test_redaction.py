"""Masking secrets in free text: every shape, wherever it sits in a long answer, and plain text left alone."""

from __future__ import annotations

import pytest

from botgateway.redaction import MASK, redact_text

PROSE = "prod-db-01 (10.0.1.100) runs MySQL 8.0 in cn-hangzhou; 主机状态正常, design review signed off. " * 20


@pytest.mark.parametrize(
    ("secret", "kept"),
    [
        ("xoxb-1234-5678-abcdefgh", "xoxb-"),
        ("xapp-1-A0B1-99-ffee", "xapp-"),
        ("sk-proj-AbCdEf123456", "sk-"),
        ("Authorization: Bearer abcdef.123456", "Bearer "),
        ("token qwertyuiop123", "token "),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl", "eyJ"),
        ("AKIAIOSFODNN7EXAMPLE", "AKIA"),
        ("LTAI5tAbCdEfGhIjKlMn", "LTAI"),
        ("redis://admin:hunter2@10.0.0.5:6379/0", "redis://admin:"),
        ("client_secret=s3cr3tValue", "client_secret="),
        ('"api_key": "abc123xyz"', '"api_key": "'),
        ("PASSWORD=Passw0rd!", "PASSWORD="),
    ],
)
def test_each_shape_is_masked_inside_a_long_plain_answer(secret: str, kept: str) -> None:
    masked = redact_text(f"{PROSE}the value is {secret} as configured. {PROSE}")
    assert secret not in masked
    assert f"{kept}{MASK}" in masked
    assert masked.startswith(PROSE) and masked.endswith(PROSE)


def test_plain_text_comes_back_unchanged() -> None:
    assert redact_text(PROSE) == PROSE


def test_configured_secret_values_are_masked_wherever_they_appear() -> None:
    assert redact_text(f"{PROSE}plainvalue42{PROSE}", ["plainvalue42"]) == f"{PROSE}{MASK}{PROSE}"
