"""``sandloop``: the command line's entry point, and the table of its commands.

Each command lives in a module of its own part (``run``/``replay`` in :mod:`executor.run_cli`,
``policy``/``audit`` in :mod:`policies.cli` …) whose ``register(subparsers)`` adds it and sets
``func`` (parsed args → exit code). Only the module of the command given is imported, so
``sandloop --version`` or ``sandloop policy explain`` never pays for the openai client, Docker or
Playwright; the whole table is loaded only when a help or usage text lists every command.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from executor.exits import EPILOG, ExitCode, fail
from sandloop import __version__
from sandloop.errors import ConfigError, HostPathRefused, SandloopError, describe

__all__ = ["COMMANDS", "EPILOG", "build_parser", "main"]

#: command word → the module whose ``register(subparsers)`` adds it (a module may add several;
#: the order here is the order ``sandloop --help`` lists them in). A new command is one line.
COMMANDS: dict[str, str] = {
    "run": "executor.run_cli",
    "replay": "executor.run_cli",
    "gc": "sandbox.cli",
    "doctor": "sandbox.cli",
    "policy": "policies.cli",
    "audit": "policies.cli",
    "apply-patch": "sandbox.patch.cli",
    "report": "executor.report.cli",
    "env": "executor.env_cli",
    "k8s": "executor.k8s_cli",
    "snapshot": "executor.snapshot_cli",
    "mcp": "executor.mcp.cli",  # argparse only: the MCP SDK is imported when `mcp` runs
}


class _Parser(argparse.ArgumentParser):
    """The top-level parser, holding only the commands registered so far: a help or usage text
    (``sandloop --help``, ``sandloop`` alone, a bad option) registers the rest before it lists them."""

    def __init__(self) -> None:
        super().__init__(prog="sandloop", description="Run OpenAI Responses API tool calls in a sandbox.",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
        self.add_argument("--version", action="version", version=f"sandloop {__version__}")
        # The commands' own parsers are plain ones (the default would be this class again).
        self._commands = self.add_subparsers(dest="command", required=True, parser_class=argparse.ArgumentParser)
        self._registered: set[str] = set()

    def load(self, modules: Sequence[str]) -> _Parser:
        for name in dict.fromkeys(modules):
            if name not in self._registered:
                self._registered.add(name)
                importlib.import_module(name).register(self._commands)
        return self

    def format_usage(self) -> str:
        self.load(list(COMMANDS.values()))
        return super().format_usage()

    def format_help(self) -> str:
        self.load(list(COMMANDS.values()))
        return super().format_help()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with ``command`` registered (only its module imported), or every command."""
    return _Parser().load([COMMANDS[command]] if command in COMMANDS else list(COMMANDS.values()))


def _modules_for(argv: Sequence[str]) -> list[str]:
    """The modules a command line needs at first: its command's (its first word that is not an
    option, as the top-level options take no value), none without a command word (``--version``
    answers with nothing imported; ``--help`` loads the table when it lists it), all for a word
    that is no command (the error lists them)."""
    head = argv[:argv.index("--")] if "--" in argv else argv
    command = next((word for word in head if not word.startswith("-")), None)
    if command is None:
        return []
    return [COMMANDS[command]] if command in COMMANDS else list(COMMANDS.values())


def main(argv: Sequence[str] | None = None) -> int:
    """Every command, with no traceback for anything a user can cause: a failure is one line
    and a documented exit code (set SANDLOOP_DEBUG=1 to see the traceback of a bug)."""
    words = list(sys.argv[1:] if argv is None else argv)
    args = _parse(_Parser().load(_modules_for(words)), words)
    try:
        code: int = args.func(args)
    except BrokenPipeError:
        # The reader went away (``| head``): nothing more can be said to it, and Python must not
        # complain when it flushes stdout on the way out.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except (SandloopError, OSError, ValueError) as exc:
        usage = isinstance(exc, (ConfigError, ValueError, HostPathRefused))
        return fail(args, ExitCode.USAGE if usage else ExitCode.ERROR, describe(exc))
    except Exception as exc:
        if os.environ.get("SANDLOOP_DEBUG"):
            raise
        return fail(args, ExitCode.ERROR, f"{describe(exc)} (a bug in sandloop: SANDLOOP_DEBUG=1 shows where)")
    return code


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Options anywhere: what follows ``--`` is given to the command that takes free words
    (``policy explain FILE --json -- 'git push'``) whatever came before it; argparse alone
    would have handed the positional its (empty) words before seeing ``--``."""
    tail: list[str] | None = None
    if "--" in argv:
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    if tail is not None:
        dest = getattr(args, "words_after_dashes", None)
        if dest is None:
            parser.error(f"{args.command} takes no words after --")
        setattr(args, dest, [*(getattr(args, dest) or []), *tail])
    return args


if __name__ == "__main__":
    raise SystemExit(main())
