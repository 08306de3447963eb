"""Prometheus metrics of turns, tools, cards and the models' tokens and cost.

The gateway reports each finished turn to its :class:`TurnObserver`\\ s;
:class:`PrometheusTelemetry` turns those reports into counters and histograms
on a registry of its own (never the process-global one, so two runtimes in one
process, as in tests, do not collide), which the gateway's HTTP server serves
on ``/metrics`` (:mod:`botgateway.http.metrics`). Tokens and cost are counted per
model call as the :class:`~botgateway.usage.recorder.UsageRecorder` records it
(turns and the gateway's own summaries alike).

Every metric is a counter or a histogram: under ``botgateway run --workers`` each
worker writes its values to files that every scrape sums
(prometheus_client's multiprocess mode), which is right for those; a gauge
would need a mode of its own.
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram

from botgateway.cards.metrics import CardMetrics
from botgateway.stores.base import AuditRecord, UsageRow

__all__ = ["LATENCY_BUCKETS", "PrometheusTelemetry", "TurnObserver"]

_MAX_LABEL = 100
"""A model name longer than this is cut in labels (the provider names it; a label must stay small)."""

LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Seconds; covers a fast card update up to a slow multi-round turn."""


class TurnObserver(Protocol):
    """Told about every finished turn (after its card is final)."""

    def turn_ended(self, record: AuditRecord, card: CardMetrics | None) -> None:
        """Record one turn; must not block or raise."""
        ...


class PrometheusTelemetry:
    """Counters and histograms of turns, tool calls and card API calls."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        """The registry the metrics live in (served on ``/metrics``)."""
        self.turns = Counter(
            "botgateway_turns", "Finished turns by platform and outcome.", ["platform", "outcome"], registry=self.registry
        )
        self.turn_seconds = Histogram(
            "botgateway_turn_seconds", "Wall time of a turn.", ["platform"], buckets=LATENCY_BUCKETS, registry=self.registry
        )
        self.tokens = Counter(
            "botgateway_llm_tokens",
            "Model tokens by model and kind: prompt, completion, and the parts of those: cached (prompt tokens served "
            "from the provider's cache), reasoning (completion tokens spent reasoning).",
            ["model", "kind"], registry=self.registry,
        )
        self.cost = Counter(
            "botgateway_llm_cost", "What the model calls cost at the configured prices (usage.prices), by model.",
            ["model", "currency"], registry=self.registry,
        )
        self.tool_calls = Counter(
            "botgateway_tool_calls", "Tool calls by tool and result.", ["tool", "ok"], registry=self.registry
        )
        self.card_calls = Counter(
            "botgateway_card_api_calls", "Card API calls by platform and op.", ["platform", "op"], registry=self.registry
        )
        self.card_throttles = Counter(
            "botgateway_card_throttles", "Card API calls the platform throttled.", ["platform"], registry=self.registry
        )
        self.card_fallbacks = Counter(
            "botgateway_card_fallbacks", "Final answers delivered as a new message instead of on the card.", ["platform"],
            registry=self.registry,
        )
        self.card_undelivered = Counter(
            "botgateway_card_undelivered", "Turns whose final answer could not be delivered at all.", ["platform"],
            registry=self.registry,
        )
        self.first_visible_seconds = Histogram(
            "botgateway_card_first_visible_seconds", "First model token to first visible text on the card.", ["platform"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.final_delivery_seconds = Histogram(
            "botgateway_card_final_delivery_seconds", "End of the turn to the final answer delivered.", ["platform"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )

    def turn_ended(self, record: AuditRecord, card: CardMetrics | None) -> None:
        """Record one finished turn and its card."""
        platform = record.platform
        self.turns.labels(platform, record.outcome.split(":", 1)[0]).inc()
        self.turn_seconds.labels(platform).observe(record.duration_s)
        for call in record.tool_calls:
            # A call still running when the turn was stopped has no "ok" yet.
            self.tool_calls.labels(str(call.get("name", "?")), str(call.get("ok", "stopped")).lower()).inc()
        if card is None:
            return
        for op, count in card.api_calls.items():
            self.card_calls.labels(platform, op).inc(count)
        self.card_throttles.labels(platform).inc(card.throttles)
        if card.fallback_used:
            self.card_fallbacks.labels(platform).inc()
        if not card.delivered:
            self.card_undelivered.labels(platform).inc()
        if card.first_token_to_visible_s is not None:
            self.first_visible_seconds.labels(platform).observe(card.first_token_to_visible_s)
        if card.final_delivery_s is not None:
            self.final_delivery_seconds.labels(platform).observe(card.final_delivery_s)

    def usage_recorded(self, row: UsageRow) -> None:
        """Count one model call's tokens, and its cost when its model has a price."""
        model = (row.model or "unknown")[:_MAX_LABEL]
        for kind, count in (("prompt", row.prompt_tokens), ("completion", row.completion_tokens),
                            ("cached", row.cached_tokens), ("reasoning", row.reasoning_tokens)):
            if count > 0:
                self.tokens.labels(model, kind).inc(count)
        if row.cost is not None and row.cost > 0:
            self.cost.labels(model, row.currency).inc(row.cost)
