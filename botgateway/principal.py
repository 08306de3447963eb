"""Who is asking: a platform-qualified identity, the key of every access decision.

Every inbound message carries one. The id is qualified by its platform so that
ids of different platforms never collide: ``slack:U0123`` (with the Slack team,
and a flag when the user belongs to another organisation, Slack Connect),
``dingtalk:<staffId>``, ``local:<os user>``, and later ``api:<key name>``,
``alerts:<route>``, ``schedule:<name>``. Roles name principals by id or by one
of their groups (``slack:S0ONCALL``, ``dingtalk:dept:42``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Principal", "principal_id"]


def principal_id(platform: str, user: str) -> str:
    """``platform:user`` — the qualified id (``slack:U0123``); the terminal's platform is ``local``."""
    kind = "local" if platform in ("terminal", "cli", "local") else platform
    return f"{kind}:{user}"


@dataclass(frozen=True, kw_only=True)
class Principal:
    """One asker, as the access policy sees them."""

    id: str
    """Platform-qualified id: ``slack:U0123``, ``dingtalk:manager4921``, ``local:alice``."""
    platform: str
    """The adapter the asker came through: ``slack``, ``dingtalk``, ``terminal``, ``cli``…"""
    user: str
    """The platform's own id of the asker (``U0123``, a DingTalk staff id, the OS login)."""
    team: str = ""
    """The asker's own organisation on the platform (Slack ``user_team``); empty when the platform has none."""
    external: bool = False
    """The asker belongs to another organisation than the one that installed the bot (Slack Connect)."""
    groups: frozenset[str] = field(default_factory=frozenset)
    """Qualified ids of the groups the asker is known to belong to (``slack:S0ONCALL``); filled by resolvers."""
    name: str = ""
    """Display name, when the platform gave one (never used for decisions)."""

    @classmethod
    def of(cls, platform: str, user: str, **details: object) -> Principal:
        """The principal ``platform``/``user`` with its qualified id (``details``: team, external, groups, name)."""
        return cls(id=principal_id(platform, user), platform=platform, user=user, **details)  # type: ignore[arg-type]

    def with_groups(self, groups: frozenset[str]) -> Principal:
        """The same principal, known to belong to ``groups`` too."""
        return Principal(
            id=self.id, platform=self.platform, user=self.user, team=self.team, external=self.external,
            groups=self.groups | groups, name=self.name,
        )
