"""Tencent Cloud credentials, one way for every client: the account's keys, the SDK's variables, or its chain."""

from __future__ import annotations

from typing import Any

from botgateway.config import CloudAccount
from tools.providers.sdk import credential_chain_configured, resolve_keys

__all__ = ["CHAIN_ENV", "CHAIN_FILES", "NO_CREDENTIALS", "has_credentials", "keys", "sdk_credential"]

CHAIN_ENV = ("TENCENTCLOUD_CREDENTIALS_FILE", "TKE_ROLE_ARN", "TKE_WEB_IDENTITY_TOKEN_FILE", "TENCENTCLOUD_ROLE_NAME")
"""Environment variables that give the SDK's default credential chain something to find."""

CHAIN_FILES = ((".tencentcloud", "credentials"),)
"""Credential files (under ``~``) the chain reads."""

NO_CREDENTIALS = (
    "no credentials: set access_key_id/access_key_secret, TENCENTCLOUD_SECRET_ID/KEY, "
    "or a ~/.tencentcloud/credentials profile"
)
"""What to do when no credential is found."""


def keys(account: CloudAccount) -> tuple[str, str, str | None]:
    """(secret id, secret key, session token) of the account or the environment."""
    return resolve_keys(account, "TENCENTCLOUD_SECRET_ID", "TENCENTCLOUD_SECRET_KEY", "TENCENTCLOUD_SESSION_TOKEN")


def has_credentials(account: CloudAccount) -> bool:
    """Keys, or something for the SDK's chain to find (checked first: an empty chain ends probing metadata)."""
    secret_id, secret_key, _ = keys(account)
    return bool(secret_id and secret_key) or credential_chain_configured(CHAIN_ENV, CHAIN_FILES)


def sdk_credential(account: CloudAccount) -> Any | None:
    """The SDK credential of ``account`` (blocking: the chain may read files or a role); ``None`` when there is none."""
    from tencentcloud.common import credential

    secret_id, secret_key, token = keys(account)
    if secret_id and secret_key:
        return credential.Credential(secret_id, secret_key, token)
    if credential_chain_configured(CHAIN_ENV, CHAIN_FILES):
        # The SDK's default chain: profile file, CVM role, TKE OIDC.
        return credential.DefaultCredentialProvider().get_credential()
    return None
