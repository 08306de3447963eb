"""Secrets never reach a log line: masking of token-like text, sensitive keys and configured values.

:class:`RedactSecrets` is a structlog processor (:mod:`botgateway.logs` puts it
in every pipeline); :func:`redact_text` masks one string; :func:`secret_values`
collects the configured secrets to mask wherever they appear.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, unquote_plus, urlsplit

from pydantic import SecretBytes, SecretStr
from structlog.typing import EventDict, WrappedLogger

__all__ = ["MASK", "RedactSecrets", "redact_text", "secret_values"]

MASK = "***"
"""What a secret is replaced with."""

_SENSITIVE_KEY = re.compile(
    r"token|secret|passw|pwd|api[_-]?key|apikey|authorization|credential|cookie|"
    r"private[_-]?key|access[_-]?key|signature|session[_-]?key",
    re.IGNORECASE,
)
"""Event keys whose (non-numeric) values are always masked."""

_TEXT_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str], str], ...] = (
    # Each pattern comes with the lowercase text it cannot match without ("needles"): most text holds none
    # of them, and a substring test is far cheaper than running the pattern (a final answer is redacted for
    # the audit trail at the end of every turn).
    # Slack bot/user/app tokens: xoxb-…, xoxp-…, xapp-…
    (("xox", "xapp-"), re.compile(r"\b(xox[abposre]|xapp)-[A-Za-z0-9-]+"), rf"\1-{MASK}"),
    # OpenAI-style keys (sk-…, sk-proj-…, sk-ant-…)
    (("sk-",), re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"), f"sk-{MASK}"),
    # HTTP auth schemes
    (("bearer", "basic", "token"), re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{6,}", re.IGNORECASE),
     rf"\1 {MASK}"),
    # JSON Web Tokens
    (("eyj",), re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), f"eyJ{MASK}"),
    # Cloud access key ids (AWS, Alibaba Cloud)
    (("akia", "asia"), re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), rf"\1{MASK}"),
    (("ltai",), re.compile(r"\bLTAI[0-9A-Za-z]{12,24}\b"), f"LTAI{MASK}"),
    # Passwords in URLs: scheme://user:password@host
    (("://",), re.compile(r"\b([a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s/]+@", re.IGNORECASE), rf"\1{MASK}@"),
    # key=value, key: value, "key": "value" (query strings, headers, JSON bodies, reprs)
    (
        ("token", "key", "secret", "pass", "pwd", "sign", "authorization"),
        re.compile(
            r"""(?ix)
            \b((?:[a-z0-9]+[_-])*
               (?:access[_-]?token|refresh[_-]?token|id[_-]?token|token|api[_-]?key|apikey|
                  client[_-]?secret|app[_-]?secret|secret|password|passwd|pwd|signature|sign|
                  session[_-]?key|authorization)
            )
            (["']?\s*[=:]\s*["']?)
            (?!\d+\b)(?!\*\*\*)(?!Bearer\b|Basic\b)
            [^\s"'&,;}\]]+
            """
        ),
        rf"\1\2{MASK}",
    ),
)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with token-like substrings and the given secret values masked."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, MASK)
    lowered = text.lower()
    for needles, pattern, replacement in _TEXT_PATTERNS:
        # Masking only ever adds "***" and text the match held, so it never brings a later pattern's needle.
        if any(needle in lowered for needle in needles):
            text = pattern.sub(replacement, text)
    return text


class RedactSecrets:
    """Processor that masks secrets anywhere in the event, nested values included.

    - values of keys named like ``*token*``, ``*secret*``, ``*password*``, ``api_key``,
      ``authorization`` (numbers are kept, so ``prompt_tokens=120`` still shows);
    - ``SecretStr`` / ``SecretBytes`` values;
    - token-looking text inside any string (``xoxb-…``, ``xapp-…``, ``sk-…``,
      ``Bearer …``, ``access_token=…``, ``user:password@`` in URLs), tracebacks included;
    - the exact ``secrets`` given (the configured keys), wherever they appear.

    Other objects are rendered with ``repr`` first (as the renderers would) so a
    secret inside an object's repr is masked too.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a secret that contains another is masked whole; short ones would mask noise.
        self.secrets = tuple(sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True))

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        for key, value in list(event_dict.items()):
            if key.startswith("_"):  # structlog's own plumbing (_record, _from_structlog)
                continue
            event_dict[key] = self.redact(value, sensitive=key != "event" and bool(_SENSITIVE_KEY.search(key)))
        return event_dict

    def redact(self, value: Any, *, sensitive: bool = False) -> Any:
        """``value`` with secrets masked; ``sensitive`` masks every non-numeric leaf."""
        if value is None or isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, (SecretStr, SecretBytes)):
            return MASK if value.get_secret_value() else ""
        if isinstance(value, str):
            if sensitive:
                return MASK if value else ""
            return redact_text(value, self.secrets)
        if isinstance(value, bytes):
            return self.redact(value.decode("utf-8", "replace"), sensitive=sensitive)
        if isinstance(value, Mapping):
            return {
                k: self.redact(v, sensitive=sensitive or bool(_SENSITIVE_KEY.search(str(k)))) for k, v in value.items()
            }
        if isinstance(value, (list, tuple, set, frozenset)):
            return [self.redact(item, sensitive=sensitive) for item in value]
        return self.redact(repr(value), sensitive=sensitive)


_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@\s]*:[^@\s/]+@", re.IGNORECASE)


def _url_secrets(url: str) -> list[str]:
    """A URL's passwords, decoded and as written: its user's, and options named like one (``sentinel_password``)."""
    found: list[str] = []
    try:
        password = urlsplit(url).password if _URL_PASSWORD.match(url) else None
    except ValueError:  # a malformed host ("[::1"): the text patterns still mask user:password@
        password = None
    if password:
        found += [unquote(password), password]
    for option in url.partition("?")[2].partition("#")[0].split("&"):
        name, _, value = option.partition("=")
        if value and _SENSITIVE_KEY.search(unquote_plus(name)):
            found += [unquote_plus(value), value]
    return found


def secret_values(model: Any) -> list[str]:
    """Every non-empty ``SecretStr`` value in a pydantic model tree (pass the whole ``Config``)."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, SecretStr):
            secret = value.get_secret_value()
            if secret and _URL.match(secret):
                # In a URL only the passwords are secret; the hosts are what people need to see.
                found.extend(_url_secrets(secret))
            elif secret:
                found.append(secret)
        elif hasattr(value, "model_fields"):
            for name in type(value).model_fields:
                walk(getattr(value, name))
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(model)
    return found
