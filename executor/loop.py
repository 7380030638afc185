"""The bounded turn loop over ``client.responses.create``.

One turn: send a request (model, tools, tool_choice and instructions every time — request
parameters are not inherited through ``previous_response_id``), execute the actionable items
of the response, answer them all in the next request. The run stops when a response needs no
answer (usually a final ``message``), or when a budget, a refusal, an incomplete response or
an error ends it; every stop has a reason and an exit code.

State: by default each request chains on ``previous_response_id`` and sends
only the new items. ``stateless=True`` sends ``store: false`` plus
``include: ["reasoning.encrypted_content"]`` and replays the whole history each turn: every
prior output item in order, stripped of output-only fields (see :func:`replayable`), then our
outputs.

The core is async (``AsyncOpenAI``); :func:`run_sync` wraps it for scripts, and a sync
``OpenAI`` client works too (its calls go to a thread).
"""

from __future__ import annotations

import asyncio
import collections.abc
import time
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from typing import Any

import openai
import typing_extensions
from openai import AsyncOpenAI, OpenAI
from openai.types.responses import Response, ResponseInputItemParam

from executor.dispatch import CallRecord, Dispatcher, EventSink
from executor.exits import ExitCode
from executor.items import as_dict
from executor.registry import tool_params
from executor.toolbox import Toolbox

__all__ = [
    "Budgets",
    "ExitCode",
    "Loop",
    "LoopConfig",
    "LoopState",
    "RunResult",
    "TurnHook",
    "TurnRecord",
    "Usage",
    "harness_note",
    "replayable",
    "run_sync",
]


@dataclass
class Budgets:
    max_turns: int = 50
    max_total_tokens: int | None = None
    max_wall_s: float | None = None
    max_tool_calls: int | None = None


@dataclass
class LoopConfig:
    model: str = "gpt-5.4"
    instructions: str | None = None
    tool_choice: Any = "auto"  # incl. {"type":"allowed_tools", …}: passed through unchanged
    stateless: bool = False
    max_output_tokens: int | None = None
    #: the limit for the one retry after an incomplete(max_output_tokens) response;
    #: None → twice the current limit, at least 25 000 (the reasoning guide's advice).
    retry_max_output_tokens: int | None = None
    budgets: Budgets = field(default_factory=Budgets)
    #: any other request parameters (reasoning, parallel_tool_calls, truncation …)
    extra: dict[str, Any] = field(default_factory=dict)
    #: when the model stops while async tools still run, wait for them and send their outputs
    wait_for_async: bool = True


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0

    def add(self, response: Response) -> Usage:
        """Add a response's usage; returns that response's own usage."""
        u = response.usage
        if u is None:
            return Usage()
        reasoning = getattr(u.output_tokens_details, "reasoning_tokens", 0) or 0
        turn = Usage(u.input_tokens, u.output_tokens, reasoning, u.total_tokens)
        self.input_tokens += turn.input_tokens
        self.output_tokens += turn.output_tokens
        self.reasoning_tokens += turn.reasoning_tokens
        self.total_tokens += turn.total_tokens
        return turn


@dataclass
class LoopState:
    """Where a conversation stands before a request (or after the last answer): enough for
    another process to continue it — the chain's last response id and the items the next
    request sends (or, stateless, the whole history, reasoning items included), and what the
    budgets have used so far."""

    previous_response_id: str | None
    pending: list[dict[str, Any]]
    history: list[dict[str, Any]]
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    tool_calls: int = 0
    wall_s: float = 0.0
    stateless: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LoopState:
        """The form :meth:`to_json` writes; KeyError/TypeError/ValueError when it is not."""
        return cls(previous_response_id=data["previous_response_id"], pending=list(data["pending"]),
                   history=list(data["history"]), usage=Usage(**data["usage"]), turns=int(data["turns"]),
                   tool_calls=int(data["tool_calls"]), wall_s=float(data["wall_s"]),
                   stateless=bool(data["stateless"]))

    def continued(self, task: str | list[dict[str, Any]] | None) -> LoopState:
        """This state with ``task`` (a new user message) added to what the next request sends."""
        if not task:
            return self
        items = [{"role": "user", "content": task}] if isinstance(task, str) else list(task)
        return LoopState(self.previous_response_id, [*self.pending, *items], [*self.history, *items],
                         Usage(**asdict(self.usage)), self.turns, self.tool_calls, self.wall_s, self.stateless)


@dataclass
class TurnRecord:
    index: int
    response_id: str
    status: str
    usage: Usage
    request_s: float  # waiting for the API
    tools_s: float  # executing the calls
    total_s: float
    retried: bool = False
    calls: list[CallRecord] = field(default_factory=list)


#: told of each turn's end (its record and where the conversation stands), before the next
#: request: a snapshot taken there can continue the run
TurnHook = Callable[[TurnRecord, LoopState], Awaitable[None]]


@dataclass
class RunResult:
    final_text: str
    reason: str
    exit_code: ExitCode
    usage: Usage
    turns: list[TurnRecord]
    tool_calls: int = 0
    wall_s: float = 0.0
    last_response_id: str | None = None
    detail: str = ""  # the error / refusal / budget text behind ``reason``

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["exit_code"] = int(self.exit_code)
        return data


# -- stateless replay ---------------------------------------------------------------------


def _atoms(annotation: Any) -> list[Any]:
    """Flatten Required/Optional/Annotated/Union into the alternatives they allow."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, typing.Required, typing.NotRequired, typing.Annotated) or (
        origin is not None and str(origin) == "types.UnionType"
    ):
        args = typing.get_args(annotation)
        if origin is typing.Annotated:
            args = args[:1]
        return [a for arg in args for a in _atoms(arg)]
    return [annotation]


@cache
def _hints(td: Any) -> dict[str, Any]:
    return typing.get_type_hints(td)


def _type_literals(td: Any) -> set[str]:
    hint = _hints(td).get("type")
    if hint is None:
        return set()
    return {v for a in _atoms(hint) if typing.get_origin(a) is typing.Literal
            for v in typing.get_args(a)}


def _prune(value: Any, annotations: Sequence[Any]) -> Any:
    """Keep only what the SDK's input param types accept, recursively. Values typed loosely
    (``object``, ``Dict[str, …]``: JSON schemas, env maps) are never touched."""
    atoms = [a for ann in annotations for a in _atoms(ann)]
    if isinstance(value, dict):
        if any(a is object or a is Any or a is dict
               or typing.get_origin(a) in (dict, collections.abc.Mapping) for a in atoms):
            return value
        tds = [a for a in atoms if typing_extensions.is_typeddict(a)]
        if not tds:
            return value
        matching = [t for t in tds if value.get("type") in _type_literals(t)]
        tds = matching or [t for t in tds if not _type_literals(t)] or tds
        out = {}
        for key, sub in value.items():
            anns = [_hints(t)[key] for t in tds if key in _hints(t)]
            if anns:  # a key no variant declares is output-only (e.g. created_by): dropped
                out[key] = _prune(sub, anns)
        return out
    if isinstance(value, list):
        elems = [typing.get_args(a)[0] for a in atoms
                 if typing.get_origin(a) is not None and typing.get_origin(a) is not typing.Literal
                 and len(typing.get_args(a)) == 1]
        return [_prune(v, elems) for v in value] if elems else value
    return value


def replayable(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as an input item: output-only fields (``created_by``, also inside each
    shell_call_output chunk) removed by following the SDK's input param types. ``program``
    items go back unchanged: their ``fingerprint`` must round-trip."""
    if item.get("type") == "program":
        return dict(item)
    return typing.cast(dict[str, Any], _prune(item, [ResponseInputItemParam]))


# -- the loop -----------------------------------------------------------------------------

Client = AsyncOpenAI | OpenAI


class _Stop(Exception):
    def __init__(self, reason: str, code: ExitCode, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason, self.code, self.detail = reason, code, detail


class Loop:
    """One agent run: a client, a configuration, the tools' back-ends."""

    def __init__(
        self,
        client: Client,
        config: LoopConfig,
        toolbox: Toolbox,
        *,
        on_event: EventSink | None = None,
        observers: Sequence[Callable[[dict[str, Any], Response], None]] = (),
        log: Any = None,
        on_turn_end: TurnHook | None = None,
    ) -> None:
        self.client, self.config, self.toolbox = client, config, toolbox
        self.on_turn_end = on_turn_end
        #: where the conversation stands before the request in flight (or after the last
        #: answer); read under :attr:`quiet`, which is held while a turn's calls run
        self.checkpoint: LoopState | None = None
        self._start: float | None = None  # the run's start, budgets' time included (monotonic)
        self.quiet = asyncio.Lock()
        self.observers = list(observers)  # e.g. a cassette recorder: (request, response)
        self.log = log  # executor.audit.RequestLog, or None
        if any(t.is_async for t in toolbox.functions) and toolbox.functions.get("wait") is None:
            toolbox.functions.add(toolbox.tasks.wait_tool())
        toolbox.functions.check_schemas()  # a strict-mode breach fails here, not with a 400
        self.tools = tool_params(toolbox)
        #: the result so far, when the run was cancelled (Ctrl-C)
        self.interrupted: RunResult | None = None
        self.dispatcher = Dispatcher(toolbox, on_event)
        self.on_event = self.dispatcher.on_event  # observers' failures are logged, never fatal

    # -- requests -----------------------------------------------------------------------

    def _body(self, input_items: list[dict[str, Any]], previous: str | None,
              max_output_tokens: int | None) -> dict[str, Any]:
        cfg = self.config
        body: dict[str, Any] = {"model": cfg.model, "input": input_items}
        if self.tools:
            body["tools"] = self.tools
            body["tool_choice"] = cfg.tool_choice
        if cfg.instructions is not None:
            body["instructions"] = cfg.instructions
        if max_output_tokens is not None:
            body["max_output_tokens"] = max_output_tokens
        if cfg.stateless:
            body["store"] = False
            body["include"] = ["reasoning.encrypted_content"]
        elif previous is not None:
            body["previous_response_id"] = previous
        body.update(cfg.extra)
        return body

    async def _create(self, body: dict[str, Any], turn: int) -> Response:
        if self.log is not None:
            self.log.request(turn, body)
        # The input items are already wire JSON (dumped from the SDK's own models, or built to
        # its param types, which declare no aliases or formats), so the SDK's per-item
        # TypedDict transform would be a no-op costing O(history) every turn — ~25 ms per
        # stateless turn at 40 turns. They go in the body as they are, through extra_body.
        params = {k: v for k, v in body.items() if k != "input"}
        params["extra_body"] = {**params.get("extra_body", {}), "input": body["input"]}
        response: Response
        try:
            if isinstance(self.client, AsyncOpenAI):
                response = await self.client.responses.create(**params)
            else:
                create: Callable[..., Response] = self.client.responses.create
                response = await asyncio.to_thread(create, **params)
        except openai.APIStatusError as exc:
            if self.log is not None:  # the log holds every answer, refusals included
                self.log.event("error", turn, status=exc.status_code, body=exc.body)
            raise
        if self.log is not None:
            self.log.response(turn, response)
        for observe in self.observers:
            observe(body, response)
        return response

    def _retry_limit(self, current: int | None) -> int:
        if self.config.retry_max_output_tokens is not None:
            return self.config.retry_max_output_tokens
        return max(2 * (current or 0), 25_000)

    async def _turn_response(self, input_items: list[dict[str, Any]], previous: str | None,
                             turn: int) -> tuple[Response, bool]:
        """One request, plus the single larger-limit retry after incomplete(max_output_tokens)."""
        limit = self.config.max_output_tokens
        response = await self._create(self._body(input_items, previous, limit), turn)
        retried = False
        if _incomplete_reason(response) == "max_output_tokens":
            limit = self._retry_limit(limit)
            self.on_event("retry", {"turn": turn, "max_output_tokens": limit})
            retried = True
            response = await self._create(self._body(input_items, previous, limit), turn)
        return response, retried

    # -- the run ------------------------------------------------------------------------

    def _check_budgets(self, turns: int, usage: Usage, calls: int, start: float) -> None:
        b = self.config.budgets
        if turns >= b.max_turns:
            raise _Stop("max_turns", ExitCode.BUDGET, f"turn budget exhausted ({b.max_turns})")
        if b.max_total_tokens is not None and usage.total_tokens >= b.max_total_tokens:
            raise _Stop("max_total_tokens", ExitCode.BUDGET,
                        f"token budget exhausted ({usage.total_tokens} ≥ {b.max_total_tokens})")
        if b.max_wall_s is not None and time.monotonic() - start >= b.max_wall_s:
            raise _Stop("max_wall_s", ExitCode.BUDGET,
                        f"wall-time budget exhausted ({b.max_wall_s:g} s)")
        if b.max_tool_calls is not None and calls > b.max_tool_calls:
            raise _Stop("max_tool_calls", ExitCode.BUDGET,
                        f"tool-call budget exhausted ({b.max_tool_calls})")

    def _remaining(self, start: float) -> float | None:
        """What is left of the wall-time budget: no call may run past it."""
        budget = self.config.budgets.max_wall_s
        return None if budget is None else max(0.0, budget - (time.monotonic() - start))

    async def _await_async(self, start: float) -> list[dict[str, Any]]:
        """Nothing to send, but async tools still run: wait for the first to finish (within the
        wall budget) and send its output, so the model sees every result."""
        tasks = self.toolbox.tasks
        if not self.config.wait_for_async or not tasks.pending:
            return []
        self.on_event("waiting", {"pending": tasks.pending})
        await tasks.wait_any(self._remaining(start))
        return tasks.take_ready()

    def checkpoint_now(self) -> LoopState | None:
        """:attr:`checkpoint` with the wall time spent until now: a request in flight (the
        model thinking) takes time before anything else of its turn is known."""
        if self.checkpoint is None or self._start is None:
            return self.checkpoint
        return replace(self.checkpoint, wall_s=time.monotonic() - self._start)

    def _checkpoint(self, previous: str | None, pending: list[dict[str, Any]], history: list[dict[str, Any]],
                    usage: Usage, turns: int, calls: int, start: float) -> LoopState:
        self.checkpoint = LoopState(previous, list(pending), list(history), Usage(**asdict(usage)), turns, calls,
                                    time.monotonic() - start, self.config.stateless)
        return self.checkpoint

    async def run(self, task: str | list[dict[str, Any]] | None, *, resume: LoopState | None = None) -> RunResult:
        """Drive the conversation from ``task``, or continue ``resume`` (a snapshot's state, with
        ``task``, if any, as the next user message): its chain, history and budgets go on."""
        resume = (resume or LoopState(None, [], [])).continued(task)
        start = self._start = time.monotonic() - resume.wall_s
        history: list[dict[str, Any]] = list(resume.history)
        pending: list[dict[str, Any]] = list(resume.pending)
        previous: str | None = resume.previous_response_id
        usage, calls = Usage(**asdict(resume.usage)), resume.tool_calls
        done = resume.turns  # turns a run this one continues already took
        turns: list[TurnRecord] = []
        result_text, last_id = "", previous
        try:
            while True:
                self._check_budgets(done + len(turns), usage, calls, start)
                self._checkpoint(previous, pending, history, usage, done + len(turns), calls, start)
                index = done + len(turns) + 1
                self.on_event("turn_start", {"turn": index})
                t0 = time.perf_counter()
                to_send = history if self.config.stateless else pending
                response, retried = await self._turn_response(to_send, previous, index)
                await self.quiet.acquire()  # until the next checkpoint: a snapshot waits for the calls
                t1 = time.perf_counter()
                turn_usage = usage.add(response)
                last_id = response.id
                record = TurnRecord(index, response.id, str(response.status), turn_usage,
                                    t1 - t0, 0.0, 0.0, retried)
                turns.append(record)
                self.on_event("response", {"turn": index, "status": response.status,
                                           "usage": turn_usage, "request_s": t1 - t0})
                _raise_for_status(response)
                result_text = response.output_text
                items = [as_dict(i) for i in response.output]
                history.extend(replayable(i) for i in items)
                previous = response.id
                actionable = self.dispatcher.count_actionable(response.output)
                if actionable:  # a final answer is never discarded for a budget
                    calls += actionable
                    self._check_budgets(0, usage, calls, start)
                dispatched = await self.dispatcher.run(response.output,
                                                       timeout_s=self._remaining(start))
                record.calls = dispatched.records
                outputs = dispatched.outputs + self.toolbox.tasks.take_ready()
                if dispatched.notes:
                    outputs.append(harness_note(dispatched.notes))
                t2 = time.perf_counter()
                record.tools_s, record.total_s = t2 - t1, t2 - t0
                if dispatched.stop is not None:
                    raise _Stop("safety_check", ExitCode.REFUSED, dispatched.stop)
                if not outputs:
                    outputs = await self._await_async(start)
                if not outputs:
                    refusal = _refusal(items)
                    if refusal is not None and not result_text:
                        raise _Stop("refusal", ExitCode.REFUSED, refusal)
                    raise _Stop("answered", ExitCode.ANSWERED)
                history.extend(outputs)
                pending = outputs
                state = self._checkpoint(previous, pending, history, usage, done + len(turns), calls, start)
                if self.on_turn_end is not None:
                    await self.on_turn_end(record, state)
                self.quiet.release()
        except _Stop as stop:
            reason, code, detail = stop.reason, stop.code, stop.detail
        except openai.APIError as exc:
            reason, code, detail = "api_error", ExitCode.ERROR, _api_error_text(exc, self.client)
        except asyncio.CancelledError:
            # Ctrl-C (asyncio cancels the run): what happened so far is still recorded and
            # summarised (``interrupted``), then the cancellation goes on.
            self.interrupted = self._finish("interrupted", ExitCode.INTERRUPTED, "interrupted", result_text,
                                            usage, turns, calls, start, last_id)
            raise
        finally:
            # The checkpoint is where a resume starts, before the turn in flight; what that turn
            # used (its response's tokens, its time) was spent all the same, and counts.
            if self.checkpoint is not None:
                self.checkpoint = replace(self.checkpoint, usage=Usage(**asdict(usage)))
                self.checkpoint = self.checkpoint_now()
            if self.quiet.locked():
                self.quiet.release()
            await self.toolbox.tasks.cancel_all()
        if reason == "answered":  # the conversation may go on from its answer
            self._checkpoint(previous, [], history, usage, done + len(turns), calls, start)
        return self._finish(reason, code, detail, result_text, usage, turns, calls, start, last_id)

    def _finish(self, reason: str, code: ExitCode, detail: str, text: str, usage: Usage,
                turns: list[TurnRecord], calls: int, start: float, last_id: str | None) -> RunResult:
        result = RunResult(text, reason, code, usage, turns, calls, time.monotonic() - start, last_id, detail)
        self.on_event("stop", {"reason": reason, "exit_code": int(code), "detail": detail})
        if self.log is not None:
            self.log.summary(result)
        return result


def harness_note(notes: Sequence[str]) -> dict[str, Any]:
    """What the model must know that no output could carry, as a developer message sent right
    after the outputs (a computer_call's output is only a screenshot)."""
    text = "\n".join(f"- {note}" for note in notes)
    return {"type": "message", "role": "developer",
            "content": f"sandloop notes about the tool calls just answered:\n{text}"}


def _incomplete_reason(response: Response) -> str | None:
    if response.status != "incomplete":
        return None
    details = response.incomplete_details
    return str(details.reason) if details is not None and details.reason else "unknown"


def _raise_for_status(response: Response) -> None:
    """Calls are executed only from a completed response: a call cut short is never run."""
    if response.status == "completed":
        return
    reason = _incomplete_reason(response)
    if reason == "content_filter":
        raise _Stop("content_filter", ExitCode.REFUSED, "the response was cut by the content filter")
    if reason is not None:
        raise _Stop("incomplete", ExitCode.INCOMPLETE, f"response incomplete: {reason}")
    if response.status == "failed":
        err = response.error
        text = f"{err.code}: {err.message}" if err is not None else "unknown error"
        raise _Stop("failed", ExitCode.ERROR, f"response failed: {text}")
    raise _Stop("failed", ExitCode.ERROR, f"unexpected response status {response.status!r}")


def _refusal(items: list[dict[str, Any]]) -> str | None:
    for item in items:
        if item.get("type") == "message":
            for part in item.get("content") or []:
                if part.get("type") == "refusal":
                    return str(part.get("refusal", ""))
    return None


def _api_error_text(exc: openai.APIError, client: Client) -> str:
    status = getattr(exc, "status_code", None)
    if isinstance(exc, openai.APIConnectionError):  # "Connection error." alone names nothing
        return f"cannot reach the Responses API at {client.base_url} ({exc.message.rstrip('.')})"
    return f"API error{f' {status}' if status else ''}: {exc.message}"


def run_sync(
    client: Client,
    task: str | list[dict[str, Any]],
    config: LoopConfig,
    toolbox: Toolbox,
    **kwargs: Any,
) -> RunResult:
    """The sync wrapper for scripts: one run on a fresh event loop."""

    async def main() -> RunResult:
        return await Loop(client, config, toolbox, **kwargs).run(task)

    return asyncio.run(main())
