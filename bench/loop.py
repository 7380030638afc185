"""Loop overhead per turn, and parallel vs one-by-one shell calls.

1. Per-turn overhead against the fake Responses server (real openai client, real HTTP on
   127.0.0.1): a 40-turn session whose one function call does nothing, so everything measured
   is the loop, the client, HTTP and the fake server — no tool time. Chained and stateless.
   Target: median ≤ 10 ms per turn.
2. Five ``sleep 0.5`` shell calls in one response (run concurrently) vs the same five calls,
   one per response (run one by one), in a Docker session (LocalSession without Docker);
   compares the time spent executing calls, over several samples (median and spread).
   Target: median ≥ 4× speedup.

Prints medians and ratios through bench/report.py (MISSED where a target is missed); it
asserts nothing (timings are not tests). ``--quick``: few turns and one sample, for CI.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import judge, load, median, p90, rounds, spread
from executor.approvals import DenyAll
from executor.loop import Budgets, Loop, LoopConfig, RunResult
from executor.policy_gate import PolicyGate
from executor.testing import (
    FakeResponsesServer,
    ScriptedModel,
    function_call,
    message,
    shell_call,
)
from executor.toolbox import Toolbox
from executor.tools import FunctionTool, FunctionTools
from policies.engine import load_policy

TURNS = rounds(40, quick=6)
NO_ARGS = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
POLICY = 'version = 1\nunattended = true\n[shell]\ndefault = "allow"\n'


async def _run(turns: list[Any], toolbox: Toolbox, *, stateless: bool = False) -> RunResult:
    with FakeResponsesServer(ScriptedModel(turns)) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="bench", max_retries=0)
        config = LoopConfig(model="bench", stateless=stateless,
                            budgets=Budgets(max_turns=len(turns) + 1))
        try:
            return await Loop(client, config, toolbox).run("bench")
        finally:
            await client.close()


async def overhead(stateless: bool) -> None:
    tools = FunctionTools()
    tools.add(FunctionTool("noop", lambda: "ok", parameters=NO_ARGS))
    turns: list[Any] = [[function_call("noop")] for _ in range(TURNS - 1)] + [[message("done")]]
    result = await _run(turns, Toolbox(functions=tools), stateless=stateless)
    assert result.reason == "answered", result.detail
    per_turn = [t.total_s * 1000 for t in result.turns[1:]]  # the first turn warms connections
    request = [t.request_s * 1000 for t in result.turns[1:]]
    loop_side = [(t.total_s - t.request_s) * 1000 for t in result.turns[1:]]
    mode = "stateless" if stateless else "chained"
    judge(f"per-turn overhead ({mode}, {len(per_turn)} turns)",
          f"median {median(per_turn):.2f} ms (request round trip {median(request):.2f} ms, loop "
          f"side {median(loop_side):.2f} ms; p90 {p90(per_turn):.2f} ms)",
          "<= 10 ms", median(per_turn) <= 10)


async def _session(workspace: Path) -> tuple[Any, str]:
    try:
        from sandbox.docker import DockerSession

        return await DockerSession.create(workspace), "docker"
    except Exception as exc:  # no engine here: measure the same helper as a local process
        from sandbox.local import LocalSession

        print(f"(no Docker session: {exc}; using LocalSession)")
        return await LocalSession.create(workspace), "local"


async def parallel_vs_serial() -> None:
    samples = rounds(8, quick=1)
    parallel: list[float] = []
    serial: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sandloop-bench-") as tmp:
        policy = Path(tmp) / "policy.toml"
        policy.write_text(POLICY)
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        session, kind = await _session(workspace)
        try:
            gate = PolicyGate(load_policy(str(policy)), DenyAll())
            toolbox = Toolbox(gate=gate, session=session)
            for _ in range(samples):  # one sample is no figure: the machine is shared
                together = await _run([[shell_call(["sleep 0.5"]) for _ in range(5)],
                                       [message("done")]], toolbox)
                apart = await _run([[shell_call(["sleep 0.5"])] for _ in range(5)]
                                   + [[message("done")]], toolbox)
                parallel.append(together.turns[0].tools_s)
                serial.append(sum(t.tools_s for t in apart.turns[:5]))
        finally:
            await session.close()
    speedups = [s / p for s, p in zip(serial, parallel, strict=True)]
    print(f"5 × sleep 0.5 ({kind}), {samples} samples: parallel {spread(parallel, ' ms', 1000, 1)}; "
          f"one by one {spread(serial, ' ms', 1000, 1)}")
    judge("speedup, parallel vs one by one", spread(speedups, "×"), ">= 4×", median(speedups) >= 4)


async def main() -> None:
    print(load())
    print("loop overhead per turn (fake Responses server over HTTP, real openai client, no tool time)")
    await overhead(stateless=False)
    await overhead(stateless=True)
    await parallel_vs_serial()
    print(f"at the end: {load()}")


if __name__ == "__main__":
    asyncio.run(main())
