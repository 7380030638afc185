"""sandloop from any MCP client; here the official MCP SDK's (pip install 'sandloop[mcp]').

    python examples/mcp_client.py                      # a scratch copy of the demo's checkout
    python examples/mcp_client.py --repo PATH --policy strict

The client launches `sandloop mcp` over stdio, as Claude Desktop, Cursor or Codex launch it:
the server's session gets its own sandbox, policy gate, audit log and run folder. No model is
involved: the script makes the calls a model would make. It lists the tools, runs the tests,
fixes the bug with apply_patch, runs them again, and shows two policy decisions: a patch to a
read-only path refused, and a prompt asked through MCP elicitation (answered at the terminal;
with none, declined).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
from common import checkout
from mcp import Client
from mcp.client.stdio import StdioServerParameters, get_default_environment

#: a V4A diff, as the Responses API's apply_patch sends one: the demo's bug, fixed
FIX = "@@ def add(a: int, b: int) -> int:\n-    return a - b\n+    return a + b\n"


def sandloop() -> str:
    """The `sandloop` installed with this Python, else the one on PATH."""
    beside = Path(sys.executable).with_name("sandloop")
    return str(beside) if beside.exists() else shutil.which("sandloop") or "sandloop"


async def ask(context: Any, params: types.ElicitRequestFormParams) -> types.ElicitResult:
    """The policy's prompts arrive as an elicitation: a form with one boolean, `allow`."""
    print(f"the server asks:\n  {params.message.replace(chr(10), chr(10) + '  ')}")
    if not sys.stdin.isatty():
        print("  nobody at a terminal to answer: declined")
        return types.ElicitResult(action="decline")
    answer = await asyncio.to_thread(input, "Allow? [y/N] ")
    return types.ElicitResult(action="accept", content={"allow": answer.strip().lower() == "y"})


async def shell(client: Client, command: str) -> dict[str, Any]:
    """One command through the shell tool; its entry of the structured result."""
    result = await client.call_tool("shell", {"commands": [command]})
    assert result.structured_content is not None, result.content
    entry: dict[str, Any] = result.structured_content["results"][0]
    refused = entry["refused"]
    if refused is not None:
        print(f"$ {command}\n  refused by rule {refused['rule_id']} ({refused['source']}): {refused['justification']}")
    else:
        print(f"$ {command}\n  exit {entry['exit_code']}, {entry['duration_s']:.2f} s")
    return entry


async def patch(client: Client, arguments: dict[str, Any]) -> bool:
    """One patch through apply_patch (all or nothing): whether it applied."""
    result = await client.call_tool("apply_patch", arguments)
    assert result.structured_content is not None, result.content
    answer = result.structured_content
    print(f"apply_patch: {'applied' if answer['applied'] else 'refused'}: {answer['message']}")
    return bool(answer["applied"])


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, help="the checkout to work in (default: a scratch copy of the "
                        "demo's checkout)")
    parser.add_argument("--policy", default="default", help="a policy file or preset name")
    args = parser.parse_args()
    with checkout(args.repo) as repo:
        # A server gets few of the client's variables (HOME, PATH …): pass the one that says
        # where sandloop keeps its run folders, when it is set.
        env = {**get_default_environment(), **{k: v for k, v in os.environ.items() if k == "XDG_STATE_HOME"}}
        server = StdioServerParameters(command=sandloop(), args=[
            "mcp", "--repo", str(repo), "--policy", args.policy, "--browser", "off"], env=env)
        async with Client(server, elicitation_callback=ask) as client:
            tools = (await client.list_tools()).tools
            print("tools: " + ", ".join(tool.name for tool in tools))

            before = await shell(client, "python3 -m unittest -q")
            print(f"tests before: {'pass' if before['exit_code'] == 0 else 'fail'}")

            await patch(client, {"patch": FIX, "operation": "update_file", "path": "calc.py"})

            after = await shell(client, "python3 -m unittest -q")
            print(f"tests now: {'pass' if after['exit_code'] == 0 else 'fail'}")

            # .git is read-only to every patch; rm is a prompt rule of the default policy.
            await patch(client, {"patch": "*** Begin Patch\n*** Add File: .git/hooks/pre-commit\n+exit 0\n"
                                          "*** End Patch\n"})
            await shell(client, "rm -f calc.py")
    print("the server's run folder (named on its stderr above) has the audit log: "
          "sandloop report and sandloop audit verify work on it")
    return 0 if after["exit_code"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
