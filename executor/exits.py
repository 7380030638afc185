"""How a command ends: the documented exit codes, and a failure said in one line.

Standard library only at import time: the command line imports this before it knows which
command it runs, so ``sandloop --version`` pays for nothing else (rich is imported only when a
failure is printed).
"""

from __future__ import annotations

import argparse
import enum
import json

__all__ = ["EPILOG", "ExitCode", "fail"]


class ExitCode(enum.IntEnum):
    """The process exit codes of ``sandloop run`` (documented in its --help)."""

    ANSWERED = 0
    ERROR = 1
    USAGE = 2
    BUDGET = 3
    REFUSED = 4  # a model refusal, a content filter or a refused safety check
    INCOMPLETE = 5
    INTERRUPTED = 130  # Ctrl-C (SIGINT), as shells report it


EPILOG = """\
exit codes:
  0  answered: the model gave its final answer
  1  error: an API error, a failed response, a back-end that would not start
  2  usage: bad arguments, no API key, an invalid tool schema or policy file
  3  budget exhausted: turns, tokens, wall time or tool calls
  4  stopped by a refusal: a model refusal, the content filter, a refused safety check
  5  incomplete: the response stayed incomplete (e.g. max_output_tokens after one retry)
130  interrupted: Ctrl-C (the run summary is still printed and the sandbox removed)

environment:
  OPENAI_API_KEY   the API key (without it, only --demo runs, offline)
  OPENAI_BASE_URL  another Responses endpoint (overridden by --base-url)
"""


def fail(args: argparse.Namespace, code: ExitCode, text: str) -> int:
    """A command that ended before it could produce a result: one line on stderr, and with
    --json the same as a JSON object on stdout (every exit path prints one)."""
    from executor.terminal import console, shown  # rich, only when there is something to say

    if getattr(args, "json", False):
        print(json.dumps({"reason": code.name.lower(), "exit_code": int(code), "detail": text}, indent=2))
    console().print(f"[red]sandloop {getattr(args, 'command', '')}: {shown(text)}[/]")
    return int(code)
