"""shell_call → shell_call_output (docs/protocol.md says what is sent).

The commands of one call run in order in the session, one output entry each, each with its own
timeout (the call's ``timeout_ms``, or the default, capped by the configured maximum). Every
command asks the gate first; a refusal answers that command with the reason on stderr and exit
code 126 and the others still run. The allowed commands go to the session together
(:meth:`~sandbox.base.Session.run_many`: one request, not one round trip each) — up to a command
the gate would ask a person about: the commands before it run first, so the person decides
knowing what they did. After a command times out the rest of the call is skipped (each answered
as skipped), so one call can never cost more than one timeout. A back-end failure
— a dead container, a daemon error — becomes stderr text and exit code 125 for that command;
the session starts a fresh container for the next one. ``max_output_length`` is echoed back and
applied per command to stdout+stderr together, keeping the head and the tail of each.

:func:`shell_call_output` is the pure part: item + per-command results → the output item.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from openai.types.responses import ResponseFunctionShellToolCall

from executor.gate import Gate
from executor.items import Output
from executor.kinds import MalformedCall, ToolKind
from executor.toolbox import Toolbox
from sandbox.base import Session, with_session_notes
from sandloop.errors import SandboxError, SandloopError, describe
from sandloop.limits import Limits
from sandloop.results import CommandResult
from sandloop.verdict import Decision, Verdict

__all__ = [
    "EXIT_BACKEND_ERROR",
    "EXIT_DENIED",
    "ShellCallKind",
    "Step",
    "apply_length",
    "effective_timeout_ms",
    "handle_shell_call",
    "run_steps",
    "session_unavailable",
    "shell_call_output",
    "step_from_result",
    "truncate_middle",
]

EXIT_DENIED = 126  # the shell's own code for "found but cannot be executed"
EXIT_BACKEND_ERROR = 125  # Docker's convention for "the engine failed, not the command"


@dataclass(frozen=True)
class Step:
    """What one command produced, in the shape the wire needs, and what the wire cannot carry
    (other front-ends report it: the MCP server's structured results)."""

    stdout: str
    stderr: str
    exit_code: int | None  # None: timed out
    #: the policy's refusal, when the command did not run because of it
    refusal: Verdict | None = None
    #: bytes the sandbox dropped from the middle of stdout and stderr (its per-stream cap)
    dropped_bytes: tuple[int, int] = (0, 0)
    #: characters cut from the middle of stdout+stderr to meet the call's max_output_length
    dropped_chars: int = 0
    #: not run: an earlier command of the call timed out
    skipped: bool = False
    duration_s: float = 0.0

    def wire(self) -> dict[str, Any]:
        outcome: dict[str, Any] = (
            {"type": "timeout"} if self.exit_code is None else {"type": "exit", "exit_code": self.exit_code}
        )
        return {"stdout": self.stdout, "stderr": self.stderr, "outcome": outcome}


def truncate_middle(text: str, limit: int) -> str:
    """At most ``limit`` characters: the head and the tail, and how much was cut between them."""
    if len(text) <= limit:
        return text
    marker = f"\n…[{len(text) - limit} chars dropped]…\n"
    if limit <= len(marker):
        return text[:limit]
    keep = limit - len(marker)
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head) :]


def apply_length(step: Step, limit: int | None) -> Step:
    """``step`` with stdout+stderr cut to ``limit`` characters (the call's max_output_length),
    the head and tail of each kept, and how many characters were cut."""
    if limit is not None:
        limit = max(0, limit)  # a negative limit from the model means "nothing", not "everything"
    if limit is None or len(step.stdout) + len(step.stderr) <= limit:
        return step
    # stderr is usually short and says why something failed: it gets up to half first.
    err_budget = min(len(step.stderr), limit // 2)
    out_budget = limit - err_budget
    if len(step.stdout) < out_budget:
        err_budget = limit - len(step.stdout)
        out_budget = len(step.stdout)
    return replace(step, stdout=truncate_middle(step.stdout, out_budget),
                   stderr=truncate_middle(step.stderr, err_budget),
                   dropped_chars=len(step.stdout) + len(step.stderr) - limit)


def _with_note(stderr: str, note: str) -> str:
    sep = "" if not stderr or stderr.endswith("\n") else "\n"
    return f"{stderr}{sep}[sandloop] {note}\n"


def step_from_result(result: CommandResult, *, timeout_ms: int, memory: str | None = None) -> Step:
    stderr = result.stderr.text
    exit_code = result.exit_code
    if result.timed_out:
        stderr = _with_note(stderr, f"timed out after {timeout_ms} ms; the command's processes were killed")
        exit_code = None
    elif result.oom_killed:
        stderr = _with_note(stderr, "killed: out of memory" + (f" (memory limit {memory})" if memory else ""))
    elif result.signal:
        stderr = _with_note(stderr, f"killed by signal {result.signal}")
    return Step(result.stdout.text, stderr, exit_code,
                dropped_bytes=(result.stdout.dropped_bytes, result.stderr.dropped_bytes),
                duration_s=result.duration_s)


def shell_call_output(call_id: str, steps: Sequence[Step], *, max_output_length: int | None = None,
                      caller: Any = None) -> Output:
    """The shell_call_output answering a call: one entry per command, each cut to the call's
    ``max_output_length`` (echoed back). It carries no ``status``: the API refuses one."""
    out: Output = {
        "type": "shell_call_output",
        "call_id": call_id,
        "output": [apply_length(s, max_output_length).wire() for s in steps],
    }
    if max_output_length is not None:
        out["max_output_length"] = max_output_length
    if caller is not None:
        out["caller"] = caller
    return out


def effective_timeout_ms(requested: int | None, limits: Limits) -> int:
    """The call's ``timeout_ms`` (a request) as the limits grant it."""
    return round(limits.timeout_s(None if requested is None else requested / 1000) * 1000)


SKIPPED = "[sandloop] skipped: an earlier command in this call timed out"


async def run_steps(
    commands: Sequence[str],
    session: Session,
    gate: Gate,
    *,
    call_id: str,
    timeout_ms: int,
    limits: Limits,
    env: dict[str, str] | None = None,
    memory: str | None = None,
) -> list[Step]:
    steps: list[Step | None] = [None] * len(commands)
    allowed: list[int] = []  # every command the gate allowed
    ran = 0  # how many of them went to the session

    async def run_allowed() -> int | None:
        """Run the allowed commands not run yet; the index of one that timed out, if any."""
        nonlocal ran
        pending, ran = allowed[ran:], len(allowed)
        while pending:
            results = await session.run_many([commands[i] for i in pending], timeout_s=timeout_ms / 1000,
                                             max_output_bytes=limits.max_output_bytes, env=env)
            answered = results or [SandboxError("the sandbox ran nothing")]
            for index, result in zip(pending[:len(answered)], answered, strict=True):
                steps[index] = await _step(commands[index], result, session, gate, call_id=call_id,
                                           timeout_ms=timeout_ms, memory=memory)
                if isinstance(result, CommandResult) and result.timed_out:
                    return index
            # What is left after a sandbox failure runs in the sandbox started in its place.
            pending = pending[max(1, len(results)):]
        return None

    timed_out: int | None = None
    for index, command in enumerate(commands):
        if len(allowed) > ran and gate.shell_asks(command):
            timed_out = await run_allowed()
            if timed_out is not None:
                break
        verdict = await gate.shell(command, call_id=call_id)
        if verdict.decision is not Decision.ALLOW:
            steps[index] = Step("", f"{describe_refusal(verdict.justification, verdict.rule_id)}\n", EXIT_DENIED,
                                refusal=verdict)
            continue
        allowed.append(index)
    else:
        timed_out = await run_allowed()
    if timed_out is None:
        return _all(steps)
    # After a timeout nothing else of the call counts: every later command is skipped, and an
    # allowed one that never ran is recorded so (its decision is in the log already).
    for index in allowed:
        if index > timed_out:
            await gate.outcome("shell", commands[index], call_id=call_id, ok=False, detail="skipped")
    return [*_all(steps[:timed_out + 1]), *(Step("", SKIPPED, EXIT_BACKEND_ERROR, skipped=True)
                                                    for _ in commands[timed_out + 1:])]


def _all(steps: Sequence[Step | None]) -> list[Step]:
    """Every command answered: denied, or run (whatever came of it)."""
    done = [step for step in steps if step is not None]
    if len(done) != len(steps):
        raise RuntimeError("a shell_call command was neither refused nor run")  # a bug here, said so
    return done


async def _step(command: str, result: CommandResult | SandloopError, session: Session, gate: Gate, *,
                call_id: str, timeout_ms: int, memory: str | None) -> Step:
    """The step of one command that ran (or could not), and its outcome for the gate's log."""
    if isinstance(result, SandloopError):
        return Step("", with_session_notes(describe(result) + "\n", session), EXIT_BACKEND_ERROR)
    step = step_from_result(result, timeout_ms=timeout_ms, memory=memory)
    await gate.outcome("shell", command, call_id=call_id, ok=result.exit_code == 0,
                       detail="timed out" if result.timed_out else f"exit {result.exit_code}",
                       exit_code=result.exit_code, timed_out=result.timed_out,
                       duration_s=round(result.duration_s, 4))
    return replace(step, stderr=with_session_notes(step.stderr, session))


def describe_refusal(justification: str, rule_id: str | None) -> str:
    rule = f" (rule {rule_id})" if rule_id else ""
    return f"sandloop: denied by policy{rule}: {justification}"


async def handle_shell_call(
    call: ResponseFunctionShellToolCall,
    session: Session,
    gate: Gate,
    *,
    limits: Limits | None = None,
    env: dict[str, str] | None = None,
    memory: str | None = None,
) -> Output:
    """Run a local shell_call in the session and answer it."""
    limits = limits or Limits()
    action = call.action
    timeout_ms = effective_timeout_ms(action.timeout_ms, limits)
    steps = await run_steps(
        action.commands, session, gate, call_id=call.call_id, timeout_ms=timeout_ms,
        limits=limits, env=env, memory=memory,
    )
    caller = call.caller.model_dump(mode="json", exclude_unset=True) if call.caller is not None else None
    return shell_call_output(call.call_id, steps, max_output_length=action.max_output_length, caller=caller)


def _commands(item: dict[str, Any]) -> list[Any]:
    action = item.get("action")
    commands = action.get("commands") if isinstance(action, dict) else None
    return commands if isinstance(commands, list) else []


class ShellCallKind(ToolKind[ResponseFunctionShellToolCall]):
    call_type = "shell_call"
    output_type = "shell_call_output"
    model = ResponseFunctionShellToolCall

    def actionable(self, item: dict[str, Any]) -> bool:
        env = item.get("environment")
        # container_auto / container_reference: the server ran it
        return not isinstance(env, dict) or env.get("type") == "local"

    def parse(self, item: dict[str, Any]) -> ResponseFunctionShellToolCall:
        call = super().parse(item)
        if not call.action.commands:
            raise MalformedCall("invalid shell_call: action.commands is empty; send at least one "
                                "command line")
        return call

    def summary(self, item: dict[str, Any]) -> str:
        commands = _commands(item)
        if len(commands) > 1:  # each one is in parts(): they ran one by one, not as one shell line
            return f"{len(commands)} commands"
        return str(commands[0])[:120] if commands else self.call_type

    def parts(self, item: dict[str, Any]) -> list[str]:
        commands = _commands(item)
        return [str(c)[:120] for c in commands] if len(commands) > 1 else []

    def tool_params(self) -> list[dict[str, Any]]:
        tb = self.toolbox
        if tb.session is None or tb.legacy_local_shell:
            return []
        return [{"type": "shell", "environment": {"type": "local"}}]

    def unavailable(self, call: ResponseFunctionShellToolCall) -> str | None:
        return session_unavailable(self.toolbox, self.call_type)

    async def handle(self, call: ResponseFunctionShellToolCall) -> Output:
        tb = self.toolbox
        assert tb.session is not None and tb.gate is not None  # unavailable() said so
        return await handle_shell_call(call, tb.session, tb.gate, limits=tb.limits, memory=tb.memory)

    def error_output(self, item: dict[str, Any], text: str) -> Output:
        action = item.get("action")
        limit = action.get("max_output_length") if isinstance(action, dict) else None
        return shell_call_output(self.call_id(item), [Step("", text, 1)],
                                 max_output_length=limit if isinstance(limit, int) else None,
                                 caller=item.get("caller"))

    def with_note(self, output: Output, note: str) -> Output | None:
        entries = [dict(e) for e in output.get("output") or []]
        if not entries:
            return None
        entries[-1]["stderr"] = _with_note(str(entries[-1].get("stderr") or ""), note)
        return {**output, "output": entries}

    def outcome(self, output: Output) -> tuple[bool, str]:
        codes = [(c.get("outcome") or {}).get("exit_code", "timeout") for c in output.get("output") or []]
        return all(c == 0 for c in codes), f"exit {codes}"


def session_unavailable(toolbox: Toolbox, what: str) -> str | None:
    """Why shell commands cannot run in this run: each missing part named."""
    return toolbox.unavailable(what, "session", "gate")
