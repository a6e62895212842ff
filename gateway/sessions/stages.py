"""The session stages of the request pipeline.

    admit -> SessionOpen -> decide -> ... -> SessionCheck -> meter -> route -> ContextWindows

`SessionOpen` reads the record of a request that names its session (`x-session-affinity` or
`x-session-id`), for the policy's bands. `SessionCheck`, once the decision is known, settles
the session's limits and runs its checkpoint (advise or compact), then refuses a request whose
input is over the session's per-request ceiling. The session's hard caps are reserved by the
meter stage with the request's budgets (`charges.py`); the record is updated with what the
request settled, in the settle's own store operation (`update.py`).
"""

from __future__ import annotations

import logging
import time

from gateway.exchange import Endpoint, Exchange
from gateway.redaction.scrub import Scrubber
from gateway.sessions import compact
from gateway.sessions.records import Checkpoint
from gateway.sessions.refusals import input_ceiling_exceeded, session_budget_exceeded
from gateway.sessions.rules import NO_RULES
from gateway.sessions.settings import CheckpointPlan, SessionSettings
from gateway.sessions.store_access import SessionStore
from gateway.sessions.summarizer import Summarizer, SummaryFailed
from gateway.sessions.ticket import SessionTicket
from gateway.sessions.tokens import message_tokens, typical_input_tokens

logger = logging.getLogger("tollgate.sessions")

CHECKPOINT_HEADER = "x-tollgate-checkpoint"
_WORDS_PER_TOKEN = 0.75


class SessionOpen:
    name = "session"

    def __init__(self, sessions: SessionStore) -> None:
        self._sessions = sessions

    async def __call__(self, exchange: Exchange) -> None:
        principal = exchange.principal
        # Only a session the client named: a prompt family (route's fallback key) is no session.
        if exchange.session_key is None or principal is None or exchange.endpoint is not Endpoint.CHAT:
            return
        tenant = principal.tenant.name
        cached = self._sessions.cached(tenant, exchange.session_key)
        if cached is not None:
            _, record, bands = cached
        else:
            record, bands = await self._sessions.admission(tenant, exchange.session_key)
        # The workflow as the label stage named it: a configured name, "other" or "default".
        exchange.session = SessionTicket(exchange.session_key, exchange.workflow, record, bands)


class SessionCheck:
    name = "session_check"

    def __init__(
        self,
        settings: SessionSettings,
        sessions: SessionStore,
        summarizer: Summarizer,
        scrub: Scrubber,
        metered: bool,
    ) -> None:
        self._settings = settings
        self._sessions = sessions
        self._summarizer = summarizer
        self._scrub = scrub
        self._metered = metered  # hard caps are reserved by the meter stage; else checked here

    async def __call__(self, exchange: Exchange) -> None:
        ticket, principal = exchange.session, exchange.principal
        if ticket is None or principal is None:
            return
        rules = exchange.decision.session if exchange.decision is not None else NO_RULES
        limits, plan = self._settings.for_request(principal, ticket.workflow, rules)
        ticket.limits = limits
        if plan is not None:
            if plan.mode == "compact":
                await self._compact(exchange, ticket, plan)
            else:
                self._advise(exchange, ticket, plan)
        ceiling = limits.max_input_tokens
        if ceiling is not None:
            tokens = typical_input_tokens(exchange.body)
            if tokens > ceiling:
                raise input_ceiling_exceeded(tokens, ceiling)
        if not self._metered and limits.capped:
            # Nothing reserves the caps here: they are held against the record read afresh,
            # not the worker's cached copy (what requests still in flight spend is not in it).
            ticket.record = await self._sessions.record(principal.tenant.name, ticket.key, fresh=True)
            self._check_caps(ticket)

    def _advise(self, exchange: Exchange, ticket: SessionTicket, plan: CheckpointPlan) -> None:
        # The turn of the conversation as sent (its user messages), not the record's count: it
        # is exact whatever the record cache's age, and starts over once the client summarized.
        messages = exchange.body.get("messages")
        turn = compact.user_turns(messages, 0) if isinstance(messages, list) else 0
        reason = ""
        if plan.every_turns is not None and turn > 0 and turn % plan.every_turns == 0:
            reason = f"every_turns {plan.every_turns}"
        elif plan.above_tokens is not None and typical_input_tokens(exchange.body) > plan.above_tokens:
            reason = f"above_tokens {plan.above_tokens}"
        if reason:
            ticket.due = reason
            exchange.response_headers[CHECKPOINT_HEADER] = "due"

    async def _compact(self, exchange: Exchange, ticket: SessionTicket, plan: CheckpointPlan) -> None:
        assert exchange.principal is not None
        messages = exchange.body.get("messages")
        if not isinstance(messages, list):
            return
        tenant = exchange.principal.tenant.name
        known = self._sessions.checkpoints(tenant, ticket.key, ticket.record)
        applied = compact.matching(messages, known)
        start = applied.messages if applied else compact.head_length(messages)
        reason = self._due(messages, start, plan, applied)
        if reason:
            # Another worker may have made a checkpoint since this worker's cached read.
            fresh = await self._sessions.record(tenant, ticket.key, fresh=True)
            applied = compact.matching(messages, self._sessions.checkpoints(tenant, ticket.key, fresh))
            start = applied.messages if applied else start
            reason = self._due(messages, start, plan, applied)
        sent = compact.substituted(messages, applied)
        end = compact.segment_end(messages, start, plan.keep_last)
        if reason and end - start >= 2:
            made = await self._checkpoint(exchange, ticket, plan, messages, sent, applied, end, reason)
            if made is not None:
                applied, sent = made, compact.substituted(messages, made)
        if applied is not None:
            exchange.body["messages"] = sent
            ticket.compacted = applied.messages
            exchange.response_headers[CHECKPOINT_HEADER] = "compacted"

    def _due(
        self, messages: list[object], start: int, plan: CheckpointPlan, applied: Checkpoint | None
    ) -> str:
        """Why a new checkpoint is due: the turns since the last one, or the input the upstream
        would get (with the last one applied) over `above_tokens`; "" when none is."""
        if plan.every_turns is not None and compact.user_turns(messages, start) >= plan.every_turns:
            return f"every_turns {plan.every_turns}"
        if plan.above_tokens is not None:
            tokens = message_tokens(compact.substituted(messages, applied))
            if tokens > plan.above_tokens:
                return f"above_tokens {plan.above_tokens}"
        return ""

    async def _checkpoint(
        self,
        exchange: Exchange,
        ticket: SessionTicket,
        plan: CheckpointPlan,
        messages: list[object],
        sent: list[object],
        applied: Checkpoint | None,
        end: int,
        reason: str,
    ) -> Checkpoint | None:
        """A new checkpoint covering messages[:end], or None (logged, counted) when the
        summarizer gave none."""
        assert exchange.principal is not None and plan.summarizer is not None
        shift = len(messages) - len(sent)  # messages the applied checkpoint took out
        words = max(16, round(plan.summary_max_tokens * _WORDS_PER_TOKEN))
        try:
            text = await self._summarizer.summarize(
                exchange,
                plan.summarizer,
                compact.summarizer_messages(sent, end - shift, words),
                plan.summary_max_tokens,
                # Never more than half of what the user's request has left.
                min(plan.timeout_s, max(0.0, exchange.deadline - time.monotonic()) / 2),
            )
        except SummaryFailed as exc:
            ticket.summary_failed = True
            logger.warning(
                "session summary failed: the request goes on uncompacted",
                extra={"request_id": exchange.request_id, "reason": exc.reason, "detail": str(exc)},
            )
            return None
        part = self._scrub.text(text)  # stored, and sent upstream, redacted
        summary = f"{applied.summary}\n\n{part}" if applied is not None else part
        head = compact.head_length(messages)
        checkpoint = Checkpoint(
            turn=(ticket.record.turns if ticket.record else 0) + 1,
            messages=end,
            digest=compact.digest(messages, end),
            summary=summary,
            tokens_before=message_tokens(messages[head:end]),
            tokens_after=message_tokens([compact.summary_message(summary)]),
        )
        ticket.checkpoint, ticket.due = checkpoint, reason
        self._sessions.made(exchange.principal.tenant.name, ticket.key, checkpoint)
        return checkpoint

    def _check_caps(self, ticket: SessionTicket) -> None:
        """Without metering there is nothing to reserve with: the caps are held against the
        record as the store has it, which lacks what this session's requests in flight will
        spend, so concurrent requests may pass them by that much."""
        record, limits = ticket.record, ticket.limits
        if record is None:
            return
        used = record.input_tokens + record.output_tokens
        if limits.max_tokens is not None and used >= limits.max_tokens:
            raise session_budget_exceeded("tokens", used, 0, limits.max_tokens)
        if limits.max_micros is not None and record.cost_micros >= limits.max_micros:
            raise session_budget_exceeded("spend (micro-dollars)", record.cost_micros, 0, limits.max_micros)
