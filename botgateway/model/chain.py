"""The model chain: the primary endpoint, its fallbacks and the routes, behind the one interface the loop uses.

:class:`ModelChain` is a :class:`~botgateway.model.client.ChatModel`. Each round it picks
the endpoints for the running turn's asker (:mod:`botgateway.model.routes`: a
route's choice, else the primary then ``llm.fallbacks``) and asks them in order,
each through its own :class:`~botgateway.model.client.LLMClient` (its own SDK client,
retries and errors):

- an endpoint that fails *before its first token* with 429, 5xx, a timeout or a
  connection error (after its own retries) hands the round to the next one;
  nothing reached the card, so nothing is repeated;
- once the first token has arrived the endpoint owns the round: a failure
  mid-answer is :class:`~botgateway.model.client.LLMInterrupted`, never retried on
  another model, and the card says what happened;
- a refusal of the request itself (HTTP 4xx: too long, invalid, a bad key) is
  not the endpoint's ill health and ends the round as it would without a chain.

Before the first part of a round the chain yields
:class:`~botgateway.events.ModelAnswering`: which endpoint and model answer, and
the endpoint it stands in for. A circuit breaker per endpoint
(:mod:`botgateway.model.breaker`) skips one that keeps failing for a cool-down;
when every endpoint of a chain is skipped they are tried anyway, since an answer
from a doubtful endpoint beats none.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from botgateway.config import LLMConfig
from botgateway.config.llm import PRIMARY, EndpointConfig, EndpointFields
from botgateway.events import ModelAnswering
from botgateway.model.assembly import AssembledRound
from botgateway.model.breaker import Attempt, CircuitBreaker
from botgateway.model.client import LLMClient, ModelItem, RoundItem
from botgateway.model.errors import LLMError, LLMInterrupted, LLMRefused, LLMUnavailable
from botgateway.model.routes import Route, choose_route, current_asker

__all__ = ["EndpointModel", "Link", "ModelChain", "build_chain", "falls_back"]

log = structlog.get_logger(__name__)


def falls_back(error: LLMError) -> bool:
    """Whether ``error`` (before the first token) is the endpoint's ill health, worth the next endpoint.

    429 and 5xx (also 408), a timeout, a connection error or a stream that is not
    OpenAI-compatible do; a refusal of the request (4xx) or a rejected key does not.
    """
    if isinstance(error, LLMInterrupted | LLMRefused) or not isinstance(error, LLMUnavailable):
        return False
    status = error.status
    return status is None or status in (408, 429) or status >= 500


class EndpointModel(Protocol):
    """One endpoint's model client (an :class:`~botgateway.model.client.LLMClient`)."""

    def stream(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        round: int = 1,
    ) -> AsyncGenerator[RoundItem, None]:
        """Stream one completion: parts as they arrive, then the assembled round."""
        ...

    async def aclose(self) -> None:
        """Close its connections."""
        ...


@dataclass(frozen=True)
class Link:
    """One endpoint and model of a chain, with its client and its breaker."""

    endpoint: str
    """The endpoint's name: ``primary``, a fallback's or a route's own."""
    model: str
    """The model asked there."""
    client: EndpointModel
    """The client that asks it."""
    breaker: CircuitBreaker
    """Whether it is worth asking now."""


class ModelChain:
    """Endpoints tried in order before the first token, chosen per asker by the routes.

    Args:
        links: Every endpoint-and-model of the configuration, by key.
        default: The keys of the default chain, in order (the primary first).
        routes: The routes, in configuration order; the first that matches the asker chooses the chain.
    """

    def __init__(self, links: Mapping[str, Link], default: Sequence[str], routes: Sequence[Route] = ()) -> None:
        if not default:
            raise ValueError("a chain needs at least one endpoint")
        self._links = dict(links)
        self._default = tuple(self._links[key] for key in default)
        self._routes = tuple(routes)
        self._by_route = {route.name: tuple(self._links[key] for key in route.chain) for route in routes}
        self.model = self._default[0].model
        """The primary's model (what the chain answers with when all is well)."""

    def chain_for_asker(self) -> tuple[Link, ...]:
        """The links for the running turn's asker, in the order they are tried."""
        route = choose_route(self._routes, current_asker())
        return self._default if route is None else self._by_route[route.name]

    async def aclose(self) -> None:
        """Close every endpoint's connections."""
        for link in self._links.values():
            await link.client.aclose()

    async def stream(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        round: int = 1,
    ) -> AsyncGenerator[ModelItem, None]:
        """Stream one completion from the first endpoint that starts answering: :class:`ModelAnswering`, then its
        parts, then the :class:`AssembledRound`.

        Raises what the last endpoint tried raised when none started; :class:`LLMInterrupted` from the one that
        started, when it broke mid-answer.
        """
        links = self.chain_for_asker()
        failures: list[tuple[Link, LLMError]] = []
        for link, attempt in _candidates(links):
            started = await _start(link, attempt, messages, tools, tool_choice, round)
            if isinstance(started, LLMError):
                failures.append((link, started))
                log.warning("llm_endpoint_failed", endpoint=link.endpoint, model=link.model, status=started.status)
                continue
            inner, first = started
            async with aclosing(inner):
                # Standing in for the chain's first endpoint, whether it failed just now or its breaker skipped it.
                stands_in = links[0].endpoint if link is not links[0] else ""
                if stands_in:
                    log.info("llm_fallback_answering", endpoint=link.endpoint, model=link.model, fallback_from=stands_in)
                yield ModelAnswering(model=link.model, endpoint=link.endpoint, fallback_from=stands_in)
                yield first
                async for item in inner:
                    yield item
            return
        raise _all_failed(failures)

    async def complete(self, messages: Sequence[dict[str, Any]]) -> str:
        """A whole answer without tools (summaries), from the chain like any round; raises :class:`LLMError`."""
        async with aclosing(self.stream(messages)) as items:
            async for item in items:
                if isinstance(item, AssembledRound):
                    return item.text
        raise AssertionError("unreachable: stream() ends with the assembled round or raises")  # pragma: no cover


def _candidates(links: Sequence[Link]) -> Iterator[tuple[Link, Attempt]]:
    """The links to ask in turn with their attempts, each asked its breaker just before; all of them when every
    breaker says no (then with attempts that are no breaker's trial: another turn's trial stays its own)."""
    asked = False
    for link in links:
        attempt = link.breaker.try_acquire()
        if attempt is not None:
            asked = True
            yield link, attempt
        else:
            log.debug("llm_endpoint_skipped", endpoint=link.endpoint, model=link.model)
    if not asked:
        # Nothing else to ask: a doubtful endpoint beats no answer at all.
        log.warning("llm_all_endpoints_cooling_down", endpoints=[link.endpoint for link in links])
        for link in links:
            yield link, link.breaker.unacquired()


async def _start(
    link: Link,
    attempt: Attempt,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    tool_choice: str | None,
    round: int,
) -> tuple[AsyncGenerator[RoundItem, None], RoundItem] | LLMError:
    """Ask ``link`` and wait for its first item: the open stream and that item, or the error worth a fallback.

    Its breaker learns the outcome of ``attempt``; any other error (a refusal, a stop) is raised, and teaches it
    nothing.
    """
    inner = link.client.stream(messages, tools=tools, tool_choice=tool_choice, round=round)
    try:
        first = await anext(inner)
    except LLMError as exc:
        if falls_back(exc):
            link.breaker.failed(attempt)
            return exc
        link.breaker.released(attempt)
        raise
    except BaseException:  # stopped while waiting: nobody learnt whether the endpoint works
        link.breaker.released(attempt)
        raise
    link.breaker.succeeded(attempt)
    return inner, first


def _all_failed(failures: list[tuple[Link, LLMError]]) -> LLMError:
    """The error when no endpoint started answering: the only one's, or the last one's naming them all."""
    if len(failures) == 1:
        return failures[0][1]
    tried = ", ".join(f"{link.endpoint}: {_short(error)}" for link, error in failures)
    last = failures[-1][1]
    return LLMUnavailable(f"No model endpoint could answer ({tried}). {last.message}", status=last.status)


def _short(error: LLMError) -> str:
    return f"HTTP {error.status}" if error.status is not None else "no answer"


def build_chain(
    config: LLMConfig,
    *,
    base_url: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    backoff_base_s: float = 0.5,
    client: Callable[[LLMConfig, str | None], EndpointModel] | None = None,
) -> ModelChain:
    """The chain of the ``llm`` section: a client per endpoint and model, a breaker each, the routes.

    ``base_url`` overrides the primary's URL (the demo model); ``clock`` drives the breakers;
    ``client`` makes a model client from an endpoint's settings and URL override (an :class:`LLMClient` by default).
    """
    def make(settings: LLMConfig, url: str | None) -> EndpointModel:
        return LLMClient(settings, base_url=url, backoff_base_s=backoff_base_s)

    factory = client or make
    links: dict[str, Link] = {}
    endpoints: dict[str, EndpointFields | None] = {PRIMARY: None, **dict(zip(config.fallback_names(), config.fallbacks, strict=True))}

    def link(name: str, endpoint: EndpointFields | None, model: str = "") -> str:
        settings = config.endpoint_settings(endpoint, model=model)
        resolved = settings.resolved_model or "default"
        key = f"{name}/{resolved}"
        if key not in links:
            url = base_url if name == PRIMARY else None
            breaker = CircuitBreaker(key, failures=config.breaker.failures, cooldown_s=config.breaker.cooldown_s,
                                     clock=clock)
            links[key] = Link(name, resolved, factory(settings, url), breaker)
        return key

    default = [link(name, endpoint) for name, endpoint in endpoints.items()]
    routes = []
    for route, route_name in zip(config.routes, config.route_names(), strict=True):
        own = route.endpoint
        name = (own.name or route_name) if isinstance(own, EndpointConfig) else (own or PRIMARY)
        first = link(name, own if isinstance(own, EndpointConfig) else endpoints[name], route.model)
        if route.fallbacks is None:
            # A route that only picks another model keeps the usual chain. One that picks another endpoint sends its
            # questions there for a reason (a sensitive channel on a local model): none leave it unless it says so.
            rest = [key for key in default if links[key].endpoint != name] if name == PRIMARY else []
        else:
            rest = [link(fallback, endpoints[fallback]) for fallback in route.fallbacks]
        chain = tuple(dict.fromkeys([first, *rest]))
        routes.append(Route(route_name, tuple(route.channels), frozenset(route.roles), chain))
    return ModelChain(links, default, routes)
