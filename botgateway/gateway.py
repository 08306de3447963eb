"""The gateway: from an adapter's inbound message to one finished card.

Every adapter hands its parsed messages to :meth:`Gateway.submit`, which
returns at once (platforms want an ack within seconds) after checking access,
dropping redeliveries and scheduling the turn. At most one turn runs per
conversation; later questions wait in a short queue and their cards say so.
Different conversations run concurrently, up to a process-wide ceiling.

Each turn runs in a task the gateway owns, never in the caller's (DingTalk's SDK
cancels its handler tasks when its socket drops). Whatever happens to the turn
(done, failed, stopped, crashed, shutdown) its card is finished.

If the whole process dies, its cards stay on record as open, owned by its
instance id. While running, every gateway sends heartbeats to the store and
periodically finalizes the open cards whose owner has stopped sending them,
so a crashed replica's cards are closed by the replicas still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import structlog

from botgateway.access import AccessHook, allow_all
from botgateway.background import BackgroundTasks
from botgateway.budget import RateBudget
from botgateway.cards.metrics import CardMetrics
from botgateway.cards.policy import BufferPolicy
from botgateway.cards.state import CardState
from botgateway.cards.streamer import CardStreamer
from botgateway.config import Config
from botgateway.events import (
    ToolCallFinished,
    ToolCallStarted,
    TurnDone,
    TurnEvent,
    TurnFailed,
    UsageReported,
)
from botgateway.loop import ToolLoop
from botgateway.messages import (
    InboundMessage,
    Submission,
    SubmissionStatus,
    TurnOutcome,
)
from botgateway.sink import (
    CardHandle,
    CardSink,
    CardTarget,
    RateLimited,
    TransientError,
)
from botgateway.snapshot import CardSnapshot
from botgateway.stores.base import AuditRecord, OpenCard, Store
from botgateway.strings import t
from botgateway.telemetry import TurnObserver

log = structlog.get_logger(__name__)

RECOVER_ATTEMPTS = 3
"""Tries to finalize one left-open card at start-up when the platform throttles or fails transiently."""
RECOVER_BACKOFF_S = 0.5
"""First wait between those tries (doubled each time; a throttle's Retry-After wins)."""
RECOVER_MAX_WAIT_S = 10.0
"""A throttle asking for a longer wait than this ends the tries: start-up does not stall on an old card."""
RECOVER_CLAIM_TTL_S = 120.0
"""One replica claims an orphaned card before closing it; others retry it only after this long."""


def _matches(text: str, words: Sequence[str]) -> bool:
    """Whether ``text`` is exactly one of ``words`` (case and trailing punctuation ignored)."""
    normalized = text.strip().strip("!.。！ ").casefold()
    return bool(normalized) and normalized in {w.casefold() for w in words}


class _Turn:
    """One scheduled turn: its card, its task and its bookkeeping."""

    def __init__(self, msg: InboundMessage, turn_id: str, state: CardState, streamer: CardStreamer) -> None:
        self.msg = msg
        self.turn_id = turn_id
        self.state = state
        self.streamer = streamer
        self.user_id = msg.ctx.user_id or msg.target.user_id
        self.go = asyncio.Event()
        self.done: asyncio.Future[TurnOutcome] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None
        self.stop_note = ""
        self.stop_requested = False
        self.entered = False
        self.finishing = False
        self.started_at = time.time()
        self.tool_calls: dict[str, dict[str, Any]] = {}
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.answer = ""
        self.outcome = "failed:internal"

    def observe(self, event: TurnEvent) -> None:
        """Keep what the audit record needs."""
        if isinstance(event, ToolCallStarted):
            self.tool_calls[event.call_id] = {"name": event.name, "arguments": event.arguments}
        elif isinstance(event, ToolCallFinished):
            entry = self.tool_calls.setdefault(event.call_id, {"name": event.name, "arguments": {}})
            entry.update(ok=event.ok, summary=event.summary, duration_s=round(event.duration_s, 3))
        elif isinstance(event, UsageReported):
            self.prompt_tokens += event.prompt_tokens
            self.completion_tokens += event.completion_tokens
        elif isinstance(event, TurnDone):
            self.outcome = "done"
            self.answer = event.result.answer
            self.prompt_tokens = event.result.usage.prompt_tokens or self.prompt_tokens
            self.completion_tokens = event.result.usage.completion_tokens or self.completion_tokens
        elif isinstance(event, TurnFailed):
            self.outcome = f"failed:{event.reason}"
            self.answer = event.partial_answer


class Gateway:
    """Access, dedupe and per-conversation scheduling of turns, each streamed into one card."""

    def __init__(
        self,
        *,
        loop: ToolLoop,
        store: Store,
        budget: RateBudget,
        config: Config,
        access: AccessHook = allow_all,
        model_label: str = "",
        observers: Sequence[TurnObserver] = (),
        clear_history: Callable[[str], Awaitable[None]] | None = None,
        instance_id: str | None = None,
    ) -> None:
        self.instance_id = instance_id or uuid.uuid4().hex
        """This process's id: the owner of its open cards, kept live by :meth:`start`'s heartbeats."""
        self._loop = loop
        self._clear_history = clear_history
        self._observers = tuple(observers)
        self._store = store
        self._budget = budget
        self._config = config
        self._access = access
        self._model_label = model_label
        self._slots = asyncio.Semaphore(config.gateway.max_concurrent_turns)
        self._conversations: dict[str, list[_Turn]] = {}
        self._turns: dict[str, _Turn] = {}
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self._background = BackgroundTasks()
        """Cards being closed after a fallback delivery; cancelled at shutdown (recovery closes them next start)."""
        self._closing = False
        self._heartbeat: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._beating = True

    # --- public API -------------------------------------------------------------

    @property
    def config(self) -> Config:
        """The configuration the gateway was built with."""
        return self._config

    def running_turn(self, conversation_id: str) -> str | None:
        """The id of the turn running (or about to run) in ``conversation_id``, if any."""
        turns = self._conversations.get(conversation_id)
        return turns[0].turn_id if turns else None

    def is_admin(self, user_id: str) -> bool:
        """Whether ``user_id`` may stop anyone's turn."""
        return bool(user_id) and user_id in self._config.gateway.admins

    async def first_delivery(self, platform: str, message_id: str) -> bool:
        """True the first time a platform delivers ``message_id`` (within the dedupe TTL).

        Adapters call it for messages they answer themselves (an image-only note)
        so a redelivery is not answered twice; :meth:`submit` calls it for questions.
        """
        if not message_id:
            return True
        try:
            first = await self._store.claim(f"{platform}:{message_id}", self._config.memory.dedupe_ttl_s)
        except Exception as exc:  # answering twice beats never answering
            log.warning("gateway.dedupe_unavailable", error=type(exc).__name__, detail=str(exc)[:200])
            return True
        if not first:
            log.info("gateway.duplicate", platform=platform, message_id=message_id)
        return first

    async def submit(self, msg: InboundMessage, sink: CardSink, policy: BufferPolicy) -> Submission:
        """Schedule ``msg`` and return at once; the turn runs in the gateway's own task."""
        locale = msg.target.locale
        if not await self.first_delivery(msg.platform, msg.message_id):
            return Submission("duplicate", "")

        if self._is_stop_word(msg.text):
            return await self._stop_from_message(msg, sink)

        if self._clear_history is not None and _matches(msg.text, self._config.gateway.clear_words):
            return await self._clear_from_message(msg, sink)

        if self._closing:
            return self._refuse(msg, sink, t(locale, "shutting_down"))

        try:
            refusal = await self._access(msg)
        except Exception as exc:
            log.error("gateway.access_hook_failed", error=type(exc).__name__)
            refusal = "the access check failed; please try again later"
        if refusal is not None:
            log.info("gateway.refused", platform=msg.platform, user=msg.ctx.user_id, reason=refusal)
            return self._refuse(msg, sink, t(locale, "refused", reason=refusal))

        turns = self._conversations.setdefault(msg.conversation_id, [])
        waiting = len(turns) - 1
        if turns and waiting >= self._config.gateway.max_queued_per_conversation:
            log.info("gateway.queue_full", conversation=msg.conversation_id, waiting=waiting)
            return self._refuse(msg, sink, t(locale, "queue_full", n=len(turns)))

        turn = self._new_turn(msg, sink, policy)
        turns.append(turn)
        self._turns[turn.turn_id] = turn
        position = len(turns) - 1
        if position == 0:
            turn.go.set()
        else:
            turn.state.mark_queued(position)
        turn.task = asyncio.create_task(self._run(turn), name=f"turn-{turn.turn_id}")
        log.info(
            "gateway.submitted",
            turn_id=turn.turn_id,
            conversation=msg.conversation_id,
            platform=msg.platform,
            user=turn.user_id,
            position=position,
        )
        if position:
            return Submission("queued", turn.turn_id, turn.done, position=position)
        return Submission("started", turn.turn_id, turn.done)

    async def stop_turn(self, turn_id: str, user_id: str) -> bool:
        """Stop a running or queued turn (stop buttons); only its asker or an admin may.

        Returns True when the turn was told to stop. The card ends as "stopped"
        and the conversation's history is left as it was before the turn.
        """
        turn = self._turns.get(turn_id)
        if turn is None or turn.done.done() or turn.finishing:
            return False  # unknown, or the answer is complete and its card being finalized
        if user_id != turn.user_id and not self.is_admin(user_id):
            log.info("gateway.stop_refused", turn_id=turn_id, user=user_id)
            return False
        self._cancel(turn, stopped_by=user_id)
        return True

    async def wait_turn(self, turn_id: str) -> TurnOutcome | None:
        """Wait until ``turn_id``'s card is final (None when the turn is unknown)."""
        turn = self._turns.get(turn_id)
        if turn is None:
            return None
        return await asyncio.shield(turn.done)

    async def start(self) -> None:
        """Tell the store this process is live, now and every ``gateway.heartbeat_s`` until :meth:`aclose`.

        Other processes leave a live process's open cards alone. Call it before
        the adapters start, so that no card is created by an unannounced process.
        Idempotent.
        """
        if self._heartbeat is not None or self._closing:
            return
        await self._beat()
        self._heartbeat = asyncio.create_task(self._beat_forever(), name=f"gateway-heartbeat-{self.instance_id[:8]}")

    def watch_open_cards(self, sinks: Mapping[str, CardSink], *, older_than_s: float = 0.0) -> None:
        """Run :meth:`recover_open_cards` every ``gateway.recover_interval_s`` until :meth:`aclose`.

        So the cards of a replica that crashed while this one keeps running are
        closed without waiting for a restart. Calling it again replaces the sinks.
        """
        if self._closing:
            return
        if self._watcher is not None:
            self._watcher.cancel()
        self._watcher = asyncio.create_task(
            self._watch(dict(sinks), older_than_s), name=f"gateway-recovery-{self.instance_id[:8]}"
        )

    async def recover_open_cards(self, sinks: Mapping[str, CardSink], *, older_than_s: float = 0.0) -> int:
        """Finalize cards left streaming by a process that is gone; returns how many were closed.

        A card is an orphan when its owner (the process that streams it) no
        longer sends heartbeats; a card without an owner (written by an older
        release) when it is older than ``older_than_s``. This process's own cards
        are never touched. Each orphan is finalized as failed with a short
        "interrupted, please ask again" note, retried a few times when throttled
        or failing transiently. A card the sink still cannot finalize (deleted,
        expired) is forgotten. Cards of platforms without a sink here are left
        for the process that serves them.
        """
        try:
            cards = await self._store.open_cards()
        except Exception as exc:
            log.error("gateway.recover_failed", error=type(exc).__name__, detail=str(exc)[:200])
            return 0
        # Read after the cards: a process beats before it creates any card, so every owner seen above is listed if live.
        live = await self._live_owners(cards)
        now = time.time()
        closed = 0
        for card in cards:
            if not self._orphaned(card, live, now, older_than_s):
                continue
            sink = sinks.get(card.platform)
            if sink is None:
                log.info("gateway.recover_skipped", platform=card.platform, card_id=card.card_id, reason="adapter not running")
                continue
            if not await self._claim_orphan(card):
                continue
            if await self._finalize_orphan(card, sink):
                closed += 1
        if cards:
            log.info("gateway.recovered", open_cards=len(cards), finalized=closed)
        return closed

    async def aclose(self) -> None:
        """Stop accepting questions, stop running turns and finish their cards as stopped."""
        self._closing = True
        await _cancel_task(self._watcher)
        turns = list(self._turns.values())
        for turn in turns:
            if not turn.done.done():
                turn.stop_note = t(turn.msg.target.locale, "shutdown_note")
                self._cancel(turn, stopped_by="", note=turn.stop_note)
        tasks = [t.task for t in turns if t.task is not None] + list(self._side_tasks)
        if tasks:
            # finish() retries the final update up to its deadline; do not wait forever
            timeout = self._config.card.final_deadline_s + 5
            _done, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                log.warning("gateway.close_timeout", unfinished=len(pending))
                await asyncio.wait(pending, timeout=2)
                # finish() shields the final delivery from its caller: end it here, or it outlives us
                await asyncio.gather(*(t.streamer.aclose() for t in turns if t.task in pending), return_exceptions=True)
        for turn in turns:
            # A task cancelled before its first step never resolved its future: nobody may wait forever.
            if not turn.done.done():
                turn.done.set_result(TurnOutcome(turn.turn_id, "stopped", turn.answer, turn.state.snapshot()))
        await self._background.aclose()
        # Last: a card still open now is an orphan that the other processes may close.
        if self._heartbeat is not None:
            heartbeat, self._heartbeat = self._heartbeat, None
            await _cancel_task(heartbeat)
            try:
                async with asyncio.timeout(5):
                    await self._store.forget_instance(self.instance_id)
            except Exception as exc:  # the heartbeat then simply expires
                log.warning("gateway.forget_instance_failed", error=type(exc).__name__)

    # --- internals ---------------------------------------------------------------

    async def _beat(self) -> None:
        try:
            await self._store.heartbeat(self.instance_id, self._config.gateway.instance_ttl_s)
        except Exception as exc:
            # Logged once per outage: the beat is retried every heartbeat_s anyway.
            if self._beating:
                log.warning("gateway.heartbeat_failed", error=type(exc).__name__, detail=str(exc)[:200])
            self._beating = False
            return
        if not self._beating:
            log.info("gateway.heartbeat_restored")
        self._beating = True

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self._config.gateway.heartbeat_s)
            await self._beat()

    async def _watch(self, sinks: Mapping[str, CardSink], older_than_s: float) -> None:
        while True:
            await asyncio.sleep(self._config.gateway.recover_interval_s)
            try:
                await self.recover_open_cards(sinks, older_than_s=older_than_s)
            except Exception as exc:  # the next round tries again
                log.error("gateway.recover_failed", error=type(exc).__name__, detail=str(exc)[:200])

    async def _live_owners(self, cards: Sequence[OpenCard]) -> set[str] | None:
        """The live process ids, when some card has another owner; None when the store cannot tell."""
        if not any(card.owner and card.owner != self.instance_id for card in cards):
            return set()
        try:
            return await self._store.live_instances()
        except Exception as exc:
            log.warning("gateway.liveness_unknown", error=type(exc).__name__, detail=str(exc)[:200])
            return None

    def _orphaned(self, card: OpenCard, live: set[str] | None, now: float, older_than_s: float) -> bool:
        if card.turn_id in self._turns or card.owner == self.instance_id:
            return False
        if card.owner:
            # When liveness is unknown (store hiccup), sparing a card beats closing a live answer.
            return live is not None and card.owner not in live
        return now - card.created_at >= older_than_s

    async def _claim_orphan(self, card: OpenCard) -> bool:
        """Whether this process should close ``card`` (several replicas may find the same orphan at once)."""
        try:
            return await self._store.claim(f"recover:{card.platform}:{card.card_id}", RECOVER_CLAIM_TTL_S)
        except Exception:
            return True  # closing a card twice beats leaving it spinning

    def _is_stop_word(self, text: str) -> bool:
        return _matches(text, self._config.gateway.stop_words)

    async def _clear_from_message(self, msg: InboundMessage, sink: CardSink) -> Submission:
        """Forget the conversation's history, unless a turn is still using it."""
        assert self._clear_history is not None
        locale = msg.target.locale
        if self._conversations.get(msg.conversation_id):
            return self._refuse(msg, sink, t(locale, "clear_busy"))
        try:
            await self._clear_history(msg.conversation_id)
        except Exception as exc:
            log.warning("gateway.clear_failed", conversation=msg.conversation_id, error=type(exc).__name__)
            return self._refuse(msg, sink, t(locale, "clear_failed", reason=type(exc).__name__))
        log.info("gateway.cleared", conversation=msg.conversation_id, user=msg.ctx.user_id)
        return self._refuse(msg, sink, t(locale, "cleared"), status="cleared", as_answer=True)

    def _new_turn(self, msg: InboundMessage, sink: CardSink, policy: BufferPolicy) -> _Turn:
        turn_id = uuid.uuid4().hex[:16]
        roles = set(msg.ctx.roles)
        if self.is_admin(msg.ctx.user_id):
            roles.add("admin")
        msg = dataclasses.replace(
            msg,
            target=dataclasses.replace(msg.target, turn_id=turn_id),
            ctx=dataclasses.replace(msg.ctx, conversation_id=msg.conversation_id, roles=frozenset(roles)),
        )
        card = self._config.card
        label = self._model_label
        if self._config.llm.resolved_provider == "demo":
            # the offline stand-in is always labelled as such, in the card's language
            label = t(msg.target.locale, "demo_model")
        state = CardState(
            locale=msg.target.locale,
            show_thought=card.show_thought,
            thought_chars=card.thought_chars,
            footer=card.footer,
            model_label=label,
            asker=msg.target.user_name if msg.target.is_group else "",
        )
        streamer = CardStreamer(
            sink,
            msg.target,
            policy=policy,
            budget=self._budget,
            state=state,
            final_deadline_s=card.final_deadline_s,
            store=self._store,
            late_close_s=card.late_close_s,
            background=self._background,
            instance_id=self.instance_id,
        )
        return _Turn(msg, turn_id, state, streamer)

    def _cancel(self, turn: _Turn, *, stopped_by: str, note: str | None = None) -> None:
        if note is None:
            note = "" if not stopped_by or stopped_by == turn.user_id else t(turn.msg.target.locale, "stopped_by", asker=stopped_by)
        turn.stop_note = note
        # The flag backs up the cancellation: an await that completes at the same moment may absorb it.
        turn.stop_requested = True
        log.info("gateway.stopping", turn_id=turn.turn_id, by=stopped_by or "gateway")
        # A task cancelled before its first step never runs its body, so its card would
        # never be finished; until then the flag alone stops it. Once the card is being
        # finalized, a cancel would only make ``done`` resolve before the card is final.
        if turn.task is not None and not turn.task.done() and turn.entered and not turn.finishing:
            turn.task.cancel()

    async def _stop_from_message(self, msg: InboundMessage, sink: CardSink) -> Submission:
        user = msg.ctx.user_id or msg.target.user_id
        turns = self._conversations.get(msg.conversation_id, [])
        mine = [t for t in turns if t.user_id == user or self.is_admin(user)]
        if not mine:
            note = t(msg.target.locale, "not_yours" if turns else "nothing_to_stop")
            return self._refuse(msg, sink, note, status="stopped")
        # "stop" ends the asker's running turn and drops their waiting questions too
        for turn in mine:
            self._cancel(turn, stopped_by=user)
        return Submission("stopped", mine[0].turn_id, mine[0].done)

    def _refuse(
        self, msg: InboundMessage, sink: CardSink, note: str, *, status: SubmissionStatus = "refused", as_answer: bool = False
    ) -> Submission:
        """Tell the asker ``note`` as a plain message, in the background (as a neutral answer or as an error)."""
        done: asyncio.Future[TurnOutcome] = asyncio.get_running_loop().create_future()
        if as_answer:
            snapshot = CardSnapshot(status="done", answer=note, locale=msg.target.locale)
        else:
            snapshot = CardSnapshot(status="failed", error=note, locale=msg.target.locale)

        async def deliver() -> None:
            try:
                key, limit = sink.rate_key("fallback", msg.target)
                await self._budget.acquire(key, limit, owner=f"note-{msg.message_id}")
                await sink.fallback(msg.target, snapshot)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("gateway.note_failed", platform=msg.platform, error=type(exc).__name__)
            finally:
                if not done.done():
                    done.set_result(TurnOutcome("", status, snapshot=snapshot))

        self._spawn(deliver())
        return Submission(status, "", done, message=note)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def _run(self, turn: _Turn) -> None:
        turn.entered = True
        msg = turn.msg
        metrics: CardMetrics | None = None
        started = time.monotonic()
        with structlog.contextvars.bound_contextvars(
            conversation=msg.conversation_id,
            user=turn.user_id,
            platform=msg.platform,
            turn_id=turn.turn_id,
        ):
            try:
                try:
                    await turn.streamer.start()
                    if turn.stop_requested:
                        raise asyncio.CancelledError
                    if not turn.go.is_set():
                        await turn.go.wait()
                        turn.state.mark_started()
                        await turn.streamer.refresh()
                    async with self._slots:
                        started = time.monotonic()
                        turn.started_at = time.time()
                        if turn.stop_requested:
                            raise asyncio.CancelledError
                        # aclosing: leaving the loop early (a stop) ends the turn's stream and tool calls now.
                        events = self._loop.run_turn(msg.conversation_id, msg.text, msg.ctx, turn_id=turn.turn_id)
                        async with contextlib.aclosing(events):
                            async for event in events:
                                if turn.stop_requested:
                                    raise asyncio.CancelledError
                                turn.observe(event)
                                await turn.streamer.feed(event)
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is not None:
                        task.uncancel()
                    turn.outcome = "stopped"
                    turn.answer = turn.answer or turn.state.snapshot().answer
                    turn.state.mark_stopped(turn.stop_note)
                except Exception as exc:
                    log.exception("gateway.turn_crashed", error=type(exc).__name__)
                    partial = turn.state.snapshot().answer
                    failed = TurnFailed(reason="internal", message=t(msg.target.locale, "crashed"), partial_answer=partial)
                    turn.observe(failed)
                    await self._feed_quietly(turn, failed)
                turn.finishing = True
                metrics = await turn.streamer.finish()
            except asyncio.CancelledError:
                # cancelled again while finishing (shutdown): the streamer still delivers the final
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                log.warning("gateway.finish_cancelled")
            except Exception as exc:
                log.exception("gateway.finish_failed", error=type(exc).__name__)
            finally:
                self._release(turn)
                snapshot = turn.state.snapshot()
                outcome = TurnOutcome(turn.turn_id, turn.outcome, turn.answer or snapshot.answer, snapshot, metrics)
                log.info("gateway.turn_ended", outcome=turn.outcome, duration_s=round(time.monotonic() - started, 3))
                try:
                    async with asyncio.timeout(5):
                        await self._audit(turn, outcome, time.monotonic() - started)
                except (asyncio.CancelledError, TimeoutError):
                    log.warning("gateway.audit_skipped", turn_id=turn.turn_id)
                if not turn.done.done():
                    turn.done.set_result(outcome)

    async def _feed_quietly(self, turn: _Turn, event: TurnEvent) -> None:
        try:
            await turn.streamer.feed(event)
        except Exception:
            turn.state.apply(event)

    def _release(self, turn: _Turn) -> None:
        """Take ``turn`` off its conversation and let the next waiting question run."""
        self._turns.pop(turn.turn_id, None)
        turns = self._conversations.get(turn.msg.conversation_id)
        if turns is None:
            return
        if turn in turns:
            turns.remove(turn)
        if not turns:
            del self._conversations[turn.msg.conversation_id]
            return
        turns[0].go.set()
        for position, waiting in enumerate(turns[1:], start=1):
            waiting.state.mark_queued(position)
            self._spawn(self._refresh(waiting))

    async def _refresh(self, turn: _Turn) -> None:
        """Push a state change that did not come from an event (queue position)."""
        try:
            await turn.streamer.refresh()
        except Exception as exc:
            log.debug("gateway.refresh_failed", turn_id=turn.turn_id, error=type(exc).__name__)

    async def _audit(self, turn: _Turn, outcome: TurnOutcome, duration_s: float) -> None:
        msg = turn.msg
        metrics = outcome.metrics
        extra: dict[str, Any] = {"card": metrics.to_dict()} if metrics is not None else {}
        record = AuditRecord(
            turn_id=turn.turn_id,
            platform=msg.platform,
            conversation_id=msg.conversation_id,
            user_id=turn.user_id,
            question=msg.text,
            outcome=turn.outcome,
            answer=outcome.answer,
            tool_calls=tuple(turn.tool_calls.values()),
            prompt_tokens=turn.prompt_tokens,
            completion_tokens=turn.completion_tokens,
            started_at=turn.started_at,
            duration_s=round(duration_s, 3),
            extra=extra,
        )
        try:
            await self._store.record_audit(record)
        except Exception as exc:
            log.warning("gateway.audit_failed", turn_id=turn.turn_id, error=type(exc).__name__)
        for observer in self._observers:
            try:
                observer.turn_ended(record, metrics)
            except Exception as exc:  # metrics must never cost an answer
                log.warning("gateway.observer_failed", turn_id=turn.turn_id, error=type(exc).__name__)

    async def _finalize_orphan(self, card: OpenCard, sink: CardSink) -> bool:
        target = target_from_open_card(card)
        snapshot = CardSnapshot(status="failed", error=t(target.locale, "interrupted"), locale=target.locale, seq=1 << 30)
        handle = CardHandle(card_id=card.card_id, target=target, data=dict(card.target.get("handle", {}) or {}))
        ok = False
        key, limit = sink.rate_key("finalize", target)
        for attempt in range(RECOVER_ATTEMPTS):
            try:
                await self._budget.acquire(key, limit, owner=f"recover-{card.card_id}", priority=True)
                await sink.finalize(handle, snapshot)
                ok = True
                break
            except asyncio.CancelledError:
                raise
            except (RateLimited, TransientError) as exc:
                # A restart often meets a throttled platform: a card dropped here would spin forever.
                if isinstance(exc, RateLimited):
                    wait = exc.retry_after or RECOVER_BACKOFF_S * 2**attempt
                    if wait > RECOVER_MAX_WAIT_S:
                        log.warning("gateway.recover_card_failed", platform=card.platform, card_id=card.card_id, error="throttled", retry_after=wait)
                        break  # start-up must not wait minutes for one old card
                    self._budget.pause(key, wait)
                elif attempt + 1 < RECOVER_ATTEMPTS:
                    await asyncio.sleep(RECOVER_BACKOFF_S * 2**attempt)
                log.info("gateway.recover_card_retry", platform=card.platform, card_id=card.card_id, error=type(exc).__name__)
            except Exception as exc:
                log.warning("gateway.recover_card_failed", platform=card.platform, card_id=card.card_id, error=type(exc).__name__)
                break
        else:
            log.warning("gateway.recover_card_failed", platform=card.platform, card_id=card.card_id, error="retries exhausted")
        try:
            await self._store.remove_open_card(card.platform, card.card_id)
        except Exception as exc:
            log.warning("gateway.recover_forget_failed", card_id=card.card_id, error=type(exc).__name__)
        return ok


async def _cancel_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait until it has ended."""
    if task is None or task.done():
        return
    task.cancel()
    await asyncio.wait([task])  # unlike ``await task``, a cancellation of the caller still propagates


def target_from_open_card(card: OpenCard) -> CardTarget:
    """Rebuild the :class:`CardTarget` an open card was stored with (unknown keys ignored)."""
    data = dict(card.target.get("target", card.target))
    fields = {f.name for f in dataclasses.fields(CardTarget)}
    kwargs = {k: v for k, v in data.items() if k in fields}
    kwargs.setdefault("platform", card.platform)
    kwargs.setdefault("chat_id", "")
    kwargs.setdefault("turn_id", card.turn_id)
    if not isinstance(kwargs.get("extra", {}), Mapping):
        kwargs["extra"] = {}
    return CardTarget(**kwargs)
