"""Answer every call of one response: concurrently, each call_id exactly once.

The dispatcher is generic: each item's :class:`~executor.kinds.ToolKind` (looked up by its
``type`` in :mod:`executor.registry`) says whether the client must answer it, how to validate
it, what it locks, how to run it and how to answer it with an error. All actionable calls of
one response run at once (``asyncio.gather``); their outputs come back in call order. Calls that
touch one back-end resource keep a safe order through a per-resource ``asyncio.Lock`` (FIFO,
acquired in call order): every computer action on the one browser, two patches to one file.

Whatever a handler does — raise, overrun its deadline, find its back-end dead, return something
malformed — the call still gets an output of the right type carrying the error text
(:func:`sandloop.errors.describe`). A call_id the model used for two calls is answered once
(the later call, the one the conversation keeps under that id), and the answer says so. What
the model must also be told that an output cannot carry (a computer_call's output is only a
screenshot) comes back as notes, which the loop sends beside the outputs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from executor.items import Output, ResourceKey, as_dict, echo_caller
from executor.kinds import Answer, MalformedCall, ToolKind
from executor.registry import kinds_for
from executor.toolbox import Toolbox
from sandloop.errors import NotEnabled, SafetyCheckRefused, SandboxTimeout, describe
from sandloop.verdict import Decision, Verdict

__all__ = ["CallRecord", "DispatchResult", "Dispatcher", "EventSink"]

log = logging.getLogger("sandloop.dispatch")

#: the rule a call is refused by when this run does not offer its tool (off, or no back-end)
NOT_ENABLED_RULE = "tools.not_enabled"

#: progress events: (kind, fields) — "call_start", "call_end", "decision", …
EventSink = Callable[[str, dict[str, Any]], None]


@dataclass
class CallRecord:
    call_id: str
    type: str
    summary: str
    parts: list[str] = field(default_factory=list)  # what a call of several commands ran, one each
    ok: bool = True
    outcome: str = ""
    duration_s: float = 0.0
    background: bool = False  # an async tool left running
    #: what the model was sent for this call (None while it runs in the background)
    output: dict[str, Any] | None = field(default=None, repr=False)


@dataclass
class DispatchResult:
    outputs: list[Output]
    records: list[CallRecord]
    #: set when a call must end the run (a refused safety check)
    stop: str | None = None
    #: what the model must also be told, beside the outputs
    notes: list[str] = field(default_factory=list)


class _WrongOutput(Exception):
    """A handler's output answers another call, or is of another type: a bug, answered as one."""


@dataclass
class _Work:
    kind: ToolKind[Any]
    item: dict[str, Any]
    record: CallRecord
    #: call types of earlier calls that reused this call's id (answered by this one)
    shadowed: list[str] = field(default_factory=list)


class Dispatcher:
    """Runs the actionable items of one response; owns the per-resource locks."""

    def __init__(self, toolbox: Toolbox, on_event: EventSink | None = None) -> None:
        self.toolbox = toolbox
        self.kinds = kinds_for(toolbox)
        self._sink = on_event
        self._locks: dict[tuple[str, ...], asyncio.Lock] = {}

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        """Tell the observers; an observer that fails must never cost a call its answer."""
        if self._sink is None:
            return
        try:
            self._sink(kind, data)
        except Exception:
            log.exception("progress observer failed on %s", kind)

    # -- which calls ------------------------------------------------------------------------

    def _work(self, items: Sequence[BaseModel | dict[str, Any]]) -> list[_Work]:
        dicts = [as_dict(i) for i in items]
        # Hosted calls come back already answered by an output item in the same response.
        answered = {str(d.get("call_id")) for d in dicts if str(d.get("type", "")).endswith("_output")}
        by_id: dict[str, _Work] = {}
        for item in dicts:
            kind = self.kinds.get(str(item.get("type")))
            if kind is None or not kind.actionable(item):
                continue
            call_id = kind.call_id(item)
            if call_id in answered:
                continue
            earlier = by_id.pop(call_id, None)
            work = _Work(kind, item, CallRecord(call_id, kind.call_type, kind.summary(item),
                                                      kind.parts(item)))
            if earlier is not None:
                # One call_id, two calls: the conversation keeps the later call under that id,
                # so that is the one to run and answer; the earlier one is named in the answer.
                work.shadowed = [*earlier.shadowed, earlier.kind.call_type]
            by_id[call_id] = work
        return list(by_id.values())

    def count_actionable(self, items: Sequence[BaseModel | dict[str, Any]]) -> int:
        return len(self._work(items))

    # -- one call ---------------------------------------------------------------------------

    async def _answer(self, work: _Work, deadline: float) -> Answer | None:
        """Run one call; None when it went to the background."""
        kind, item = work.kind, work.item
        if item.get("status", "completed") != "completed":
            raise NotEnabled(f"not executed: the call is {item.get('status')}")
        call = kind.parse(item)
        why = kind.unavailable(call)
        if why is not None:
            if self.toolbox.gate is not None:  # refused by the run, not its policy: recorded all the same
                await self.toolbox.gate.refused(work.record.type, work.record.summary,
                                                Verdict(Decision.DENY, why, NOT_ENABLED_RULE),
                                                call_id=work.record.call_id)
            raise NotEnabled(why)
        if kind.in_background(call):
            self.toolbox.tasks.start(work.record.call_id, lambda: self._run(kind, call),
                                     lambda exc: kind.error_output(item, describe(exc)))
            work.record.background, work.record.outcome = True, "running in the background"
            return None
        try:
            # The deadline covers waiting for the resource too: a call queued behind a slow one
            # on the same browser or file still ends on time.
            async with asyncio.timeout(deadline), contextlib.AsyncExitStack() as stack:
                for key in kind.resources(call):
                    await stack.enter_async_context(self._locks.setdefault(key, asyncio.Lock()))
                    stack.enter_context(self._holding(key, work.record.call_id))
                result = await kind.handle(call)
        except TimeoutError:
            raise SandboxTimeout(f"the call ran past its {deadline:g} s deadline") from None
        answer = result if isinstance(result, Answer) else Answer(result)
        if not kind.answers(item, answer.output):
            raise _WrongOutput("internal error: the handler returned an output that does not answer this call")
        return Answer(echo_caller(item, answer.output), answer.notes)

    @contextlib.contextmanager
    def _holding(self, key: ResourceKey, call_id: str) -> Iterator[None]:
        self.toolbox.holding[key] = call_id
        try:
            yield
        finally:
            self.toolbox.holding.pop(key, None)

    async def _run(self, kind: ToolKind[Any], call: Any) -> Output:
        result = await kind.handle(call)
        return result.output if isinstance(result, Answer) else result

    async def _one(self, work: _Work, stop: list[str], deadline: float) -> tuple[Output | None, list[str]]:
        record, kind, item = work.record, work.kind, work.item
        start = time.perf_counter()
        self.on_event("call_start", {"call_id": record.call_id, "type": record.type,
                                     "summary": record.summary, "parts": record.parts})
        failure: str | None = None  # why the call was answered with an error output instead of run
        try:
            answer = await self._answer(work, deadline)
        except (MalformedCall, _WrongOutput) as exc:
            failure = str(exc)
            answer = Answer(kind.error_output(item, failure))
        except Exception as exc:
            failure = describe(exc)
            if isinstance(exc, SafetyCheckRefused):
                stop.append(failure)
            answer = Answer(kind.error_output(item, failure))
        output, notes = (None, []) if answer is None else self._with_notes(work, answer)
        record.duration_s = time.perf_counter() - start
        if output is not None:
            # An error output is a failure whatever its type: a computer_call's is a screenshot of
            # the error text, which says nothing to a check of the output's text.
            record.ok, record.outcome = (False, failure[:100]) if failure is not None else kind.outcome(output)
            record.output = output
        self.on_event("call_end", {"call_id": record.call_id, "type": record.type,
                                   "ok": record.ok, "outcome": record.outcome,
                                   "duration_s": record.duration_s,
                                   "background": record.background})
        return output, notes

    def _with_notes(self, work: _Work, answer: Answer) -> tuple[Output, list[str]]:
        """The output with every note in its text where the output type has text, and the notes
        it cannot carry, named by call, for the loop to send beside the outputs."""
        said = list(answer.notes)
        if work.shadowed:
            said.append(f"the call_id {work.record.call_id} was used by {len(work.shadowed) + 1} "
                        f"calls ({', '.join([*work.shadowed, work.record.type])}); only the last, "
                        f"this {work.record.type}, was run and answered. Give every call its own id.")
        output, notes = answer.output, []
        for note in said:
            noted = work.kind.with_note(output, f"[sandloop] {note}")
            if noted is None:
                notes.append(f"{work.record.type} {work.record.call_id}: {note}")
            else:
                output = noted
        return output, notes

    # -- one response -----------------------------------------------------------------------

    async def run(self, items: Sequence[BaseModel | dict[str, Any]], *,
                  timeout_s: float | None = None) -> DispatchResult:
        """Answer every actionable item in ``items`` (one response's output); no call runs
        longer than the per-call deadline, nor past ``timeout_s`` (the run's wall budget)."""
        work = self._work(items)
        deadline = self.toolbox.call_timeout_s
        if timeout_s is not None:
            deadline = min(deadline, timeout_s)
        stop: list[str] = []
        results = await asyncio.gather(*(self._one(w, stop, deadline) for w in work))
        outputs = [output for output, _ in results if output is not None]
        notes = [note for _, said in results for note in said]
        return DispatchResult(outputs, [w.record for w in work], stop[0] if stop else None, notes)
