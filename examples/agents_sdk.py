"""sandloop behind the OpenAI Agents SDK (pip install 'sandloop[agents]').

    python examples/agents_sdk.py                      # the OpenAI API (OPENAI_API_KEY)
    python examples/agents_sdk.py --base-url http://127.0.0.1:8000/v1 --model my-model

The SDK's ShellTool, ApplyPatchTool (and ComputerTool, with a browser) run in sandloop's
sandbox under its policy. What the policy denies is refused with the rule's reason; what it
asks about stops the run with an interruption: you answer it at the terminal (with no terminal,
it is rejected), and the run resumes. Every decision lands in the run's audit log.
"""

from __future__ import annotations

import asyncio
import sys

import openai
from agents import Agent, RunConfig, Runner, set_tracing_disabled
from agents.models.openai_responses import OpenAIResponsesModel
from common import arguments, checkout

import executor
from executor.agents_sdk import SandloopTools

# sandloop keeps its own audit log; the SDK's traces would upload commands and outputs.
CONFIG = RunConfig(tracing_disabled=True)


def ask(question: str) -> bool:
    if not sys.stdin.isatty():
        print(f"needs approval, nobody to ask: rejected\n  {question}")
        return False
    return input(f"needs approval:\n  {question}\nAllow? [y/N] ").strip().lower() == "y"


async def main() -> int:
    args = arguments(__doc__)
    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=args.base_url)
    with checkout(args.repo) as repo:
        async with executor.open_run(repo, policy=args.policy) as run:
            tools = SandloopTools(run)
            agent = Agent(name="fixer", instructions="You fix code in a sandboxed checkout.",
                          model=OpenAIResponsesModel(model=args.model, openai_client=client),
                          tools=tools.all)
            result = await Runner.run(agent, args.task, run_config=CONFIG)
            while result.interruptions:
                state = result.to_state()
                for item in result.interruptions:
                    if ask(await tools.describe(item)):
                        await tools.approve(state, item)
                    else:
                        await tools.reject(state, item)
                result = await Runner.run(agent, state, run_config=CONFIG)
            print(f"model: {result.final_output}")
            print(f"run folder: {run.folder}\naudit head: {run.audit_head}")
    await client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
