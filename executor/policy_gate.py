"""PolicyGate: the :class:`executor.gate.Gate` handlers ask, backed by the policy engine.

ALLOW and DENY come straight from the engine. PROMPT goes to the approvals callback and comes
back as ALLOW or DENY — handlers never see PROMPT. Every decision, with the rule that made it,
is recorded in the audit log, and reported to the progress sink.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from openai.types.responses import ResponseComputerToolCall
from openai.types.responses.response_computer_tool_call import PendingSafetyCheck

from executor.approvals import ApprovalKind, ApprovalRequest, Approvals, DenyAll
from executor.safety import SafetyAnswer, SafetyCallback
from sandloop.files import PatchKind
from sandloop.verdict import Decision, Verdict

__all__ = ["PolicyGate"]


class PolicyGate:
    def __init__(
        self,
        engine: Any,
        approvals: Approvals | None = None,
        audit: Any = None,
        *,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.engine = engine  # policies.engine.PolicyEngine
        self.approvals: Approvals = approvals or DenyAll()
        self.audit = audit  # policies.audit.AuditLog, or None
        self.on_event = on_event
        self._hosts_answered: dict[str, Verdict] = {}
        self._host_locks: dict[str, asyncio.Lock] = {}

    async def _decide(self, kind: ApprovalKind, subject: str, call_id: str,
                      ask: Callable[[], Any], **fields: Any) -> Verdict:
        verdict = ask()
        if inspect.isawaitable(verdict):
            verdict = await verdict
        final: Verdict = verdict
        approved_by: str | None = None
        if verdict.decision is Decision.PROMPT:
            answer = await self.approvals(ApprovalRequest(kind, subject, call_id, verdict, fields))
            final = Verdict(Decision.ALLOW if answer.approved else Decision.DENY,
                            f"{answer.reason} (rule: {verdict.justification})",
                            verdict.rule_id, verdict.source)
            approved_by = answer.reason
        self._record(kind, subject, call_id, final, verdict, approved_by, fields)
        return final

    def _record(self, what: str, subject: str, call_id: str, final: Verdict, verdict: Verdict,
                approved_by: str | None, fields: dict[str, Any]) -> None:
        """One decision in the audit log and the progress (``verdict``: the policy's answer)."""
        if self.audit is not None:
            self.audit.record(
                "decision", action=what, subject=subject, call_id=call_id,
                decision=final.decision.value, policy_decision=verdict.decision.value,
                rule_id=final.rule_id, source=final.source, justification=final.justification,
                approval=approved_by, **fields)
        if self.on_event is not None:
            with contextlib.suppress(Exception):  # a failing observer must not decide anything
                self.on_event("decision", {"what": what, "subject": subject, "call_id": call_id,
                                           "decision": final.decision.value,
                                           "rule_id": final.rule_id})

    async def refused(self, what: str, subject: str, verdict: Verdict, *, call_id: str, **fields: Any) -> None:
        """A refusal made outside the policy, recorded and reported as the policy's are."""
        self._record(what, subject, call_id, verdict, verdict, None, fields)

    async def shell(self, command: str, *, call_id: str) -> Verdict:
        return await self._decide("shell", command, call_id, lambda: self.engine.shell(command))

    def shell_asks(self, command: str) -> bool:
        verdict: Verdict = self.engine.shell(command)  # kept by the engine: shell() pays nothing more
        return verdict.decision is Decision.PROMPT

    async def outcome(self, action: str, subject: str, *, call_id: str, ok: bool, detail: str = "",
                      **fields: Any) -> None:
        """What came of an allowed action (a file a patch changed), for the same log."""
        if self.audit is not None:
            self.audit.record("outcome", action=action, subject=subject, call_id=call_id,
                              outcome="ok" if ok else "failed", detail=detail, **fields)

    async def patch(self, path: str, kind: PatchKind, *, call_id: str, size_bytes: int | None = None) -> Verdict:
        return await self._decide("patch", f"{kind} {path}", call_id,
                                  lambda: self.engine.patch(path, kind, size_bytes=size_bytes),
                                  path=path, operation=kind, size_bytes=size_bytes)

    async def patch_refused(self, path: str, kind: PatchKind, verdict: Verdict, *, call_id: str) -> None:
        # Where the policy refuses the path by the same rule, its verdict names where the rule
        # is written; the patch's own text stays the justification (it is what the model read).
        policy: Verdict = self.engine.patch(path, kind)
        source = policy.source if policy.rule_id == verdict.rule_id else verdict.source
        final = Verdict(Decision.DENY, verdict.justification, verdict.rule_id, source)
        await self.refused("patch", f"{kind} {path}", final, call_id=call_id, path=path, operation=kind)

    async def url(self, url: str, *, call_id: str) -> Verdict:
        verdict: Verdict = self.engine.url(url)
        if verdict.decision is not Decision.PROMPT:
            return await self._decide("url", url, call_id, lambda: verdict)
        # A page asks for many resources of one host: the human answers for the host once per
        # run (one question at a time), and every request is still recorded with that answer.
        host = (urlsplit(url).hostname or "").lower()
        async with self._host_locks.setdefault(host, asyncio.Lock()):
            answered = self._hosts_answered.get(host)
            if answered is None:
                final = await self._decide("url", url, call_id, lambda: verdict)
                self._hosts_answered[host] = final
                return final
        return await self._decide("url", url, call_id, lambda: Verdict(
            answered.decision, f"{answered.justification} (answered for {host} earlier in this run)",
            verdict.rule_id, verdict.source))

    def egress(self, decision: Any) -> None:
        """A request the session's egress proxy allowed or refused (a
        ``sandbox.egress.EgressDecision``, reported from the proxy's reader thread): decided by
        the policy's ``[shell] network`` list, which the proxy enforces, and recorded here."""
        verdict = "allow" if decision.allowed else "deny"
        subject = f"{decision.method} {decision.target}"
        # A secret the proxy added is recorded by name (its host is the subject), never its value.
        secret = {"secret": decision.secret} if getattr(decision, "secret", "") else {}
        if self.audit is not None:
            self.audit.record("decision", action="egress", subject=subject, call_id="",
                              decision=verdict, policy_decision=verdict, rule_id=decision.rule,
                              justification=decision.reason, **secret)
        if self.on_event is not None and not decision.allowed:
            with contextlib.suppress(Exception):
                self.on_event("decision", {"what": "egress", "subject": subject, "call_id": "",
                                           "decision": verdict, "rule_id": decision.rule})

    def recorded(self, answer: SafetyCallback, mode: str) -> SafetyCallback:
        """``answer`` (who answers a computer call's pending safety checks, per the policy's
        ``browser.safety_checks`` = ``mode``), with every answer recorded in the audit log."""
        where = self.engine.loaded.where(("browser", "safety_checks")) if hasattr(self.engine, "loaded") else None

        async def recorded(check: PendingSafetyCheck, call: ResponseComputerToolCall, url: str) -> SafetyAnswer:
            result = await answer(check, call, url)
            if self.audit is not None:
                self.audit.record(
                    "decision", action="safety_check", subject=check.id, call_id=call.call_id,
                    decision=result.decision.value, policy_decision="prompt" if mode == "ask" else mode,
                    rule_id="browser.safety_checks", source=where, justification=check.message or "",
                    approval=result.reason, code=check.code, url=url)
            return result

        return recorded

    def blocked(self, url: str, verdict: Verdict, *, what: str, call_id: str) -> None:
        """The browser acted on a refusal (a page replaced, a request aborted, a socket closed):
        recorded beside the decisions, with the rule — also for refusals the browser derives
        from the rules itself (a name resolving to a non-public address, a scheme)."""
        if self.audit is not None:
            self.audit.record("outcome", action="url", subject=url, call_id=call_id, outcome="blocked",
                              detail=what, rule_id=verdict.rule_id, source=verdict.source,
                              justification=verdict.justification)

    async def function(self, name: str, *, call_id: str) -> Verdict:
        return await self._decide("function", name, call_id, lambda: self.engine.function(name))

    async def mcp(self, server_label: str, tool: str, *, call_id: str) -> Verdict:
        return await self._decide("mcp", f"{server_label}.{tool}", call_id,
                                  lambda: self.engine.mcp(server_label, tool),
                                  server_label=server_label, tool=tool)
