"""``botgateway access explain PRINCIPAL [--channel CHANNEL]``: what the policy grants someone, somewhere.

The same decision the gateway takes for a question (:func:`botgateway.access.policy.decide`),
over the tools this config offers, printed for an admin: the roles, the tools
offered in that channel, the resources, which calls need an approval, and the
limits; or why the principal is refused there.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from botgateway.access import Decision, Place, decide, effective_policy, refusal_note, scope_text
from botgateway.config import Config
from botgateway.grant import Limits
from botgateway.principal import Principal

__all__ = ["explain", "parse_principal"]

EXIT_OK = 0
EXIT_USAGE = 2


def parse_principal(text: str) -> Principal:
    """``slack:U0123`` (optionally ``slack:U0123@T0TEAM``) → a principal; raises ValueError with a plain reason."""
    qualified, _, team = text.strip().partition("@")
    platform, sep, user = qualified.partition(":")
    if not sep or not platform or not user:
        raise ValueError(f"{text!r} is not a qualified principal like 'slack:U0123', 'dingtalk:<staffId>' or 'local:alice'")
    return Principal.of("terminal" if platform == "local" else platform, user, team=team)


async def explain(config: Config, who: str, *, channel: str = "", direct: bool = False, external: bool = False,
                  console: Console | None = None) -> int:
    """Print the access decision for ``who`` in ``channel`` (a qualified channel id), or in a direct chat."""
    out = console or Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    try:
        principal = parse_principal(who)
    except ValueError as exc:
        err.print(Text(f"error: {exc}", style="red"))
        return EXIT_USAGE
    if external:
        principal = Principal.of(principal.platform, principal.user, team=principal.team, external=True)
    from tools.catalog import build_toolset

    toolset = await build_toolset(config.tools)
    try:
        names = [tool.name for tool in toolset.tools]
    finally:
        await toolset.aclose()
    limits = Limits(
        turns_per_minute=config.limits.turns_per_minute,
        concurrent_turns=config.limits.concurrent_turns,
        tokens_per_day=config.limits.tokens_per_day,
    )
    place = Place(channel=channel or f"{principal.platform}:direct", direct=direct or not channel)
    decision = decide(effective_policy(config.access), principal, place, names, limits=limits)
    out.print(_table(decision, channel or "a direct chat"))
    return EXIT_OK


def _table(decision: Decision, where: str) -> Table:
    table = Table(title=f"{decision.principal.id} in {where}", show_header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    grant = decision.grant
    if grant is None:
        table.add_row("refused", Text(refusal_note(decision, "en")))
        return table
    limits = grant.limits
    table.add_row("roles", Text(", ".join(grant.roles)))
    table.add_row("tools offered", Text(", ".join(sorted(grant.tools)) or "none"))
    table.add_row("resources", Text("; ".join(scope_text(s) for s in grant.scopes) or "all"))
    table.add_row("need an approval", Text(", ".join(sorted(grant.approval)) or "none"))
    table.add_row("approver", Text("yes" if grant.approver else "no"))
    table.add_row(
        "limits",
        Text(f"turns_per_minute={limits.turns_per_minute or '∞'} concurrent_turns={limits.concurrent_turns or '∞'} "
             f"tokens_per_day={limits.tokens_per_day or '∞'}"),
    )
    return table
