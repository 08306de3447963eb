"""The sources a card's answer used, as the card shows them: compact in the footer, and on a stale tool line.

Tools report where their data came from (:class:`~botgateway.tooling.Source`);
:class:`TurnSources` keeps those of a turn's successful calls, and the
functions here word them for the card in its language. Ages are measured when
the card is rendered, from each source's fetch time, so an answer that sits on
screen does not claim to be fresher than it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from botgateway.strings import DEFAULT_LOCALE, STRINGS, t
from botgateway.tooling import Source

__all__ = [
    "AGE_SHOWN_S",
    "MAX_SOURCES_SHOWN",
    "TurnSources",
    "age_text",
    "cached_note",
    "source_label",
    "sources_text",
]

AGE_SHOWN_S = 30.0
"""A source younger than this shows no age in the footer: it is as good as live."""

MAX_SOURCES_SHOWN = 4
"""Most sources the footer names; the rest are counted ("+2 more")."""

UNNAMED_ACCOUNT = "default"
"""The name the config gives an account nobody named: not worth showing."""


class TurnSources:
    """The sources of one turn's successful tool calls (mutable; owned by its card state)."""

    def __init__(self) -> None:
        self._by_call: dict[str, tuple[Source, ...]] = {}

    def add(self, call_id: str, sources: Sequence[Source]) -> None:
        """Remember what call ``call_id`` used (a call reported twice keeps the last report)."""
        if sources:
            self._by_call[call_id] = tuple(sources)

    def of(self, call_id: str) -> tuple[Source, ...]:
        """The sources of call ``call_id``; empty when it said none (or failed)."""
        return self._by_call.get(call_id, ())

    @property
    def all(self) -> tuple[Source, ...]:
        """Every call's sources, in the order the calls finished."""
        return tuple(source for sources in self._by_call.values() for source in sources)

    def __bool__(self) -> bool:
        return bool(self._by_call)


def age_text(seconds: float, locale: str = DEFAULT_LOCALE) -> str:
    """An age in its largest whole unit: ``40 s``, ``12 min``, ``3 h``, ``2 d`` (localized)."""
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return t(locale, "age_seconds", n=int(seconds))
    if seconds < 3600:
        return t(locale, "age_minutes", n=int(seconds // 60))
    if seconds < 86400:
        return t(locale, "age_hours", n=int(seconds // 3600))
    return t(locale, "age_days", n=int(seconds // 86400))


def source_label(source: Source, locale: str = DEFAULT_LOCALE) -> str:
    """The provider's name in the card's language ("阿里云"), or the tool's own label for a provider we do not know."""
    key = f"source_{source.provider}"
    return t(locale, key) if key in STRINGS[DEFAULT_LOCALE] else source.label


@dataclass
class _Group:
    """The sources of one provider and account: their regions, and the oldest fetch."""

    label: str
    account: str
    regions: list[str] = field(default_factory=list)
    fetched_at: float = 0.0

    def add(self, source: Source) -> None:
        if source.region and source.region not in self.regions:
            self.regions.append(source.region)
        if source.fetched_at > 0 and (self.fetched_at <= 0 or source.fetched_at < self.fetched_at):
            self.fetched_at = source.fetched_at  # the answer is as old as its oldest data

    def text(self, now: float, locale: str, age_shown_s: float) -> str:
        where = "/".join(part for part in (self.account, ",".join(self.regions)) if part)
        text = f"{self.label} {where}" if where else self.label
        age = now - self.fetched_at
        if self.fetched_at > 0 and age >= age_shown_s:
            return t(locale, "source_with_age", source=text, age=age_text(age, locale))
        return text


def _groups(sources: Iterable[Source], locale: str) -> list[_Group]:
    """One group per (provider, account), regions merged, in first-seen order."""
    groups: dict[tuple[str, str], _Group] = {}
    for source in sources:
        account = "" if source.account == UNNAMED_ACCOUNT else source.account
        group = groups.get((source.provider, account))
        if group is None:
            group = groups[(source.provider, account)] = _Group(source_label(source, locale), account)
        group.add(source)
    return list(groups.values())


def sources_text(
    sources: Iterable[Source],
    *,
    now: float,
    locale: str = DEFAULT_LOCALE,
    max_shown: int = MAX_SOURCES_SHOWN,
    age_shown_s: float = AGE_SHOWN_S,
) -> str:
    """The footer's sources line: "sources: Alibaba Cloud prod/cn-hangzhou,cn-shanghai (40 s old) · static
    inventory"; empty when there are none.

    One entry per provider and account (its regions merged), aged from its
    oldest fetch at ``now`` when that is ``age_shown_s`` or more; past
    ``max_shown`` entries the rest are counted.
    """
    groups = _groups(sources, locale)
    if not groups:
        return ""
    shown = [group.text(now, locale, age_shown_s) for group in groups[:max_shown]]
    if len(groups) > max_shown:
        shown.append(t(locale, "sources_more", n=len(groups) - max_shown))
    return t(locale, "footer_sources", sources=" · ".join(shown))


def cached_note(sources: Iterable[Source], *, now: float, locale: str = DEFAULT_LOCALE, stale_after_s: float) -> str:
    """What a tool line says of a result served from a cache older than ``stale_after_s`` ("cached 12 min ago");
    empty when none of its data is."""
    cached = [source.fetched_at for source in sources if source.cached and source.fetched_at > 0]
    if not cached or now - min(cached) < stale_after_s:
        return ""
    return t(locale, "tool_cached", age=age_text(now - min(cached), locale))
