"""sandloop behind the OpenAI Agents SDK (``pip install 'sandloop[agents]'``).

    from agents import Agent, Runner
    import executor
    from executor.agents_sdk import SandloopTools

    async with executor.open_run("path/to/repo", policy="default") as run:
        tools = SandloopTools(run)
        agent = Agent(name="coder", instructions="...", tools=tools.all)
        result = await Runner.run(agent, "make the tests pass")

``ShellTool``, ``ApplyPatchTool`` and ``ComputerTool`` run in the run's ONE sandbox session and
browser, through sandloop's handlers and policy gate: a policy deny is a rejected call (the
model reads sandloop's refusal, rule id included), a policy prompt an interruption approved or
rejected on the ``RunState`` — both recorded in the run's hash-chained audit log. See
docs/python.md.
"""

from executor.agents_sdk.computer import SandboxComputer
from executor.agents_sdk.editor import SandboxEditor
from executor.agents_sdk.policy import PolicyBridge
from executor.agents_sdk.shell import SandboxShell
from executor.agents_sdk.tools import SandloopTools, sandloop_tools

__all__ = ["PolicyBridge", "SandboxComputer", "SandboxEditor", "SandboxShell", "SandloopTools", "sandloop_tools"]
