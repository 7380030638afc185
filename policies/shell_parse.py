"""A shell command line → every simple command it would run, as far as can be known statically.

tree-sitter-bash gives the syntax tree; this module walks it through pipelines, ``&&``/``||``/``;``
lists, subshells, compound statements, function bodies, ``$(…)``/backticks, process
substitutions, redirections and heredocs, and parses ``bash -c '…'`` / ``sh -c`` with a literal
string recursively. Wrappers that only change *how* a command runs (``command``, ``env``,
``exec``, ``nohup``, ``timeout``, ``nice``, ``time``, ``stdbuf``, ``builtin``) and ``xargs`` are
unwrapped to the command they run; ``sudo``/``doas`` and ``find -exec`` yield both themselves
and the command they launch. A launcher whose command is not literal is UNKNOWN.

Words are kept honest about what is known: a literal word is a ``str``; anything expanded at run
time is a :class:`Dynamic` — ``ONE`` when it is exactly one word (inside double quotes), ``MANY``
when word splitting or globbing can turn it into any number of words. A simple command whose
program cannot be known (``eval``, ``source``, a name from a variable or substitution,
``bash -c "$X"``, an assignment to ``PATH``…) is marked :attr:`SimpleCommand.unknown` with the
reason; the engine never allows those.

Evasions are normalised: ``\\rm`` → ``rm``, ``e"v"al`` → ``eval``, ``/bin/rm`` → ``rm`` (the
original spelling stays in :attr:`SimpleCommand.program` for display).
"""

from __future__ import annotations

import posixpath
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

__all__ = ["MANY", "ONE", "Dynamic", "SimpleCommand", "Word", "parse"]

ONE: Literal["one"] = "one"
MANY: Literal["many"] = "many"


@dataclass(frozen=True)
class Dynamic:
    """A word whose value is only known at run time. ``kind`` says how many words it can become."""

    kind: Literal["one", "many"]
    text: str  # the source text, for display

    def __str__(self) -> str:
        return self.text


Word = str | Dynamic


@dataclass(frozen=True)
class SimpleCommand:
    """One program invocation the command line would make."""

    argv: tuple[Word, ...]  # argv[0] is the normalised program name when it is known
    text: str  # the source text of the command, for display
    program: str = ""  # argv[0] as written (e.g. "/bin/rm", "\\rm")
    unknown: str | None = None  # why this command cannot be known statically
    trusted_name: bool = True  # False for "./git": the name says git, the file may be anything

    @property
    def name(self) -> str | None:
        first = self.argv[0] if self.argv else None
        return first if isinstance(first, str) else None


_LANGUAGE = Language(tree_sitter_bash.language())
_local = threading.local()  # one Parser per thread: Parser objects are not shareable

# Directories whose programs are the system's own: "/usr/bin/rm" is rm. A path anywhere else
# ("./rm", "/tmp/x/rm") names a file that may have been written by the model, so its basename is
# used for strict rules but never to allow it.
_SYSTEM_DIRS = frozenset(
    {"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin"}
)
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "posh"})
# Builtins that run a string as code, or change what a later name runs.
_CODE_RUNNERS = {
    "eval": "eval runs a string built at run time as shell code",
    "source": "source runs a file's contents as shell code",
    ".": "'.' runs a file's contents as shell code",
    "trap": "trap registers a string to run as shell code later",
    "hash": "hash -p can make a name run a different program",
    "enable": "enable -f loads a builtin from a file",
    "alias": "alias can make a name run a different command",
    "fc": "fc re-runs commands from history",
}
# Assignments that change which program runs, or make a program run another one.
_RISKY_VARS = re.compile(
    r"^(PATH|IFS|ENV|BASH_ENV|PS4|PROMPT_COMMAND|SHELLOPTS|BASHOPTS|LD_\w*|BASH_FUNC_\w*|GIT_\w*"
    r"|PAGER|MANPAGER|EDITOR|VISUAL|LESSOPEN|LESSCLOSE|PYTHON\w*|NODE_OPTIONS|PERL5\w*|RUBYOPT)$"
)
_MAX_DEPTH = 8  # nested `sh -c` levels before giving up (UNKNOWN)


def parse(command_line: str) -> list[SimpleCommand]:
    """Every simple command ``command_line`` runs, in source order."""
    return _parse(command_line, 0)


def _parser() -> Parser:
    parser: Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = Parser(_LANGUAGE)
    return parser


def _parse(command_line: str, depth: int) -> list[SimpleCommand]:
    if depth > _MAX_DEPTH:
        return [_unknown(command_line, "shell -c nested too deeply to follow")]
    tree = _parser().parse(command_line.encode())
    if tree.root_node.has_error:
        return [_unknown(command_line, "the command line does not parse as shell")]
    out: list[SimpleCommand] = []
    _Walker(out, depth).visit(tree.root_node)
    return out


def _unknown(text: str, reason: str, argv: tuple[Word, ...] = ()) -> SimpleCommand:
    return SimpleCommand(argv=argv, text=text, program=str(argv[0]) if argv else "", unknown=reason)


def _text(node: Node) -> str:
    return node.text.decode(errors="replace") if node.text is not None else ""


class _Walker:
    def __init__(self, out: list[SimpleCommand], depth: int) -> None:
        self.out = out
        self.depth = depth

    def visit(self, node: Node) -> None:
        kind = node.type
        if kind == "command":
            self._command(node)
        elif kind == "variable_assignment":
            self._assignment(node)
            self._children(node)
        else:
            # Everything else (lists, pipelines, subshells, if/for/while/case, function bodies,
            # declarations, redirects, heredoc bodies, substitutions inside words) is walked for
            # the commands it contains. A quoted heredoc body has no children, so it runs nothing.
            self._children(node)

    def _children(self, node: Node) -> None:
        for child in node.named_children:
            self.visit(child)

    def _assignment(self, node: Node) -> None:
        name = node.child_by_field_name("name")
        if name is not None and _RISKY_VARS.match(_text(name)):
            self.out.append(
                _unknown(_text(node), f"assigns {_text(name)}, which can change what programs run")
            )

    def _command(self, node: Node) -> None:
        words: list[Word] = []
        for child in node.named_children:
            # Substitutions inside any part (name, arguments, assignments, redirects) run too.
            self.visit(child)
            if child.type == "command_name":
                words.append(_word(child.named_children[0]) if child.named_children else "")
            elif child.type not in ("variable_assignment", "file_redirect", "heredoc_redirect",
                                    "herestring_redirect"):
                words.append(_word(child))
        self.out.extend(_resolve(tuple(words), _text(node), self.depth))


# --- words -------------------------------------------------------------------------------------

_GLOB = re.compile(r"(?<!\\)[*?]|(?<!\\)\[.*\]")
_BRACE = re.compile(r"(?<!\\)\{[^}]*(,|\.\.)[^}]*\}")  # {a,b} and {1..3}; a bare {} is literal
_DQ_ESCAPE = re.compile(r'\\([\\"$`\n])')
_UNQUOTED_ESCAPE = re.compile(r"\\(.)", re.S)


def _unescape_unquoted(text: str) -> str:
    return _UNQUOTED_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _word(node: Node) -> Word:
    """The value of one word node: a literal string, or Dynamic when it depends on run time."""
    kind = node.type
    text = _text(node)
    if kind == "word":
        if _GLOB.search(text) or _BRACE.search(text):
            return Dynamic(MANY, text)  # a glob or brace expansion can become any number of words
        return _unescape_unquoted(text)
    if kind == "number":
        return text
    if kind == "raw_string":
        return text[1:-1]
    if kind in ("string", "translated_string"):
        if any(c.type != "string_content" for c in node.named_children):
            return Dynamic(ONE, text)  # double quotes keep an expansion one word
        body = text[text.index('"') + 1 : -1]
        return _DQ_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), body)
    if kind == "ansi_c_string":
        body = text[2:-1]
        # $'\x72m' spells rm: decoding every escape form is not worth the risk, so any escape
        # makes the word dynamic.
        return Dynamic(ONE, text) if "\\" in body else body
    if kind == "concatenation":
        return _concatenation(node, text)
    if kind in ("arithmetic_expansion", "process_substitution"):
        return Dynamic(ONE, text)  # a number, or a /dev/fd path: one word either way
    return Dynamic(MANY, text)  # unquoted $X, ${X}, $(…): split into any number of words


def _concatenation(node: Node, text: str) -> Word:
    children = node.named_children
    parts = [_word(c) for c in children]
    edges = [node.start_byte] + [b for c in children for b in (c.start_byte, c.end_byte)]
    if edges[1::2] != edges[0:-1:2] or edges[-1] != node.end_byte:
        return Dynamic(MANY, text)  # a part the grammar did not name sits in the word: be careful
    if _BRACE.search(text):
        return Dynamic(MANY, text)  # brace expansion across parts: {a,"b"}
    dynamic = [p for p in parts if isinstance(p, Dynamic)]
    if not dynamic:
        return "".join(p for p in parts if isinstance(p, str))
    return Dynamic(MANY if any(p.kind == MANY for p in dynamic) else ONE, text)


# --- programs, wrappers and launchers ----------------------------------------------------------


def _normalise(program: str) -> tuple[str, bool]:
    """(name used for matching, whether that name can be trusted)."""
    if "/" not in program:
        return program, True
    path = posixpath.normpath("/" + program.lstrip("/")) if program.startswith("/") else program
    directory, base = posixpath.split(path)
    return base, directory in _SYSTEM_DIRS


def _resolve(argv: tuple[Word, ...], text: str, depth: int) -> list[SimpleCommand]:
    """Turn one command's words into the simple commands it runs (unwrapping wrappers)."""
    out: list[SimpleCommand] = []
    while True:
        if not argv:
            return out  # only assignments/redirections: runs no program
        first = argv[0]
        if isinstance(first, Dynamic):
            out.append(_unknown(text, "the program name is computed at run time", argv))
            return out
        name, trusted = _normalise(first)
        argv = (name, *argv[1:])
        cmd = SimpleCommand(argv=argv, text=text, program=first, trusted_name=trusted)
        if not trusted:
            out.append(cmd)
            return out
        if name in _CODE_RUNNERS and (len(argv) > 1 or name in ("eval", "source", ".")):
            out.append(_unknown(text, _CODE_RUNNERS[name], argv))
            return out
        if name in _SHELLS:
            out.extend(_shell(cmd, depth))
            return out
        if name == "find":
            out.extend(_find(cmd, depth))
            return out
        if name == "xargs":
            out.extend(_xargs(cmd, depth))
            return out
        step = _WRAPPERS.get(name)
        if step is None:
            out.append(cmd)
            return out
        try:
            start = step(argv)
        except _Unknowable as exc:
            out.append(_unknown(text, f"{name}: {exc}", argv))
            return out
        if name in ("sudo", "doas"):
            out.append(cmd)  # privilege changes are decided on their own, then the command
        if start is None or start >= len(argv):
            if name not in ("sudo", "doas"):
                out.append(cmd)  # `env`, `command -v git`: the wrapper runs nothing else
            return out
        argv = argv[start:]


class _Unknowable(Exception):
    pass


def _literal(word: Word) -> str:
    if isinstance(word, Dynamic):
        raise _Unknowable(f"option {word.text} is computed at run time")
    return word


def _options(
    argv: tuple[Word, ...],
    *,
    flags: frozenset[str],
    with_arg: frozenset[str],
    stop_at_assignment: bool = False,
) -> int:
    """Index of the first operand after the options of a wrapper (short and long forms)."""
    i = 1
    while i < len(argv):
        arg = _literal(argv[i])
        if arg == "--":
            return i + 1
        if stop_at_assignment and "=" in arg and not arg.startswith("-"):
            name = arg.split("=", 1)[0]
            if _RISKY_VARS.match(name):
                raise _Unknowable(f"sets {name}, which can change what programs run")
            i += 1
            continue
        if not arg.startswith("-") or arg == "-":
            if arg == "-" and "-" in flags:
                i += 1
                continue
            return i
        if arg.startswith("--"):
            key = arg.split("=", 1)[0]
            if key in flags or ("=" in arg and key in with_arg):
                i += 1
            elif key in with_arg:
                i += 2
            else:
                raise _Unknowable(f"unrecognised option {arg}")
            continue
        # A cluster of short options: -in, -u NAME, -uNAME.
        j = 1
        while j < len(arg):
            opt = "-" + arg[j]
            if opt in with_arg:
                i += 1 if j + 1 < len(arg) else 2
                break
            if opt not in flags:
                raise _Unknowable(f"unrecognised option {arg}")
            j += 1
        else:
            i += 1
    return i


def _env(argv: tuple[Word, ...]) -> int | None:
    if any(isinstance(a, str) and (a in ("-S", "--split-string") or a.startswith("-S"))
           for a in argv[1:]):
        raise _Unknowable("-S splits a string into a command line")
    return _options(
        argv,
        flags=frozenset({"-i", "-0", "-", "--ignore-environment", "--null", "-v", "--debug"}),
        with_arg=frozenset({"-u", "--unset", "-C", "--chdir", "-P"}),
        stop_at_assignment=True,
    )


def _command_builtin(argv: tuple[Word, ...]) -> int | None:
    if any(a in ("-v", "-V") for a in argv[1:2]):
        return None  # `command -v git` only looks the name up
    return _options(argv, flags=frozenset({"-p"}), with_arg=frozenset())


def _nice(argv: tuple[Word, ...]) -> int | None:
    if len(argv) > 1 and isinstance(argv[1], str) and re.fullmatch(r"-\d+", argv[1]):
        return 2
    return _options(argv, flags=frozenset(), with_arg=frozenset({"-n", "--adjustment"}))


def _timeout(argv: tuple[Word, ...]) -> int | None:
    i = _options(
        argv,
        flags=frozenset({"--foreground", "--preserve-status", "-v", "--verbose"}),
        with_arg=frozenset({"-s", "--signal", "-k", "--kill-after"}),
    )
    return i + 1  # skip the DURATION operand


def _simple(flags: set[str], with_arg: set[str]) -> Callable[[tuple[Word, ...]], int | None]:
    def step(argv: tuple[Word, ...]) -> int | None:
        return _options(argv, flags=frozenset(flags), with_arg=frozenset(with_arg))

    return step


def _sudo(argv: tuple[Word, ...]) -> int | None:
    if any(a in ("-s", "-i", "--shell", "--login", "-e", "--edit") for a in argv[1:]):
        raise _Unknowable("runs a shell or an editor as another user")
    return _options(
        argv,
        flags=frozenset({"-E", "-H", "-n", "-S", "-b", "-k", "-K", "-P", "--preserve-env",
                         "--non-interactive", "--stdin", "--background"}),
        with_arg=frozenset({"-u", "--user", "-g", "--group", "-p", "--prompt", "-C", "-h",
                            "--host", "-r", "-t", "-U", "-D", "--chdir", "-T"}),
        stop_at_assignment=True,
    )


_WRAPPERS = {
    "command": _command_builtin,
    "builtin": _simple(set(), set()),
    "env": _env,
    "exec": _simple({"-c", "-l"}, {"-a"}),
    "nohup": _simple(set(), set()),
    "nice": _nice,
    "timeout": _timeout,
    "time": _simple({"-p"}, set()),
    "coproc": _simple(set(), set()),
    "stdbuf": _simple(set(), {"-i", "-o", "-e", "--input", "--output", "--error"}),
    "sudo": _sudo,
    "doas": _simple({"-n", "-s"}, {"-u", "-C"}),
}


def _shell(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    """`bash -c 'literal'` is parsed recursively; `bash script.sh` stays a bash command."""
    argv = cmd.argv
    has_c = False
    i = 1
    while i < len(argv):
        arg = argv[i]
        if isinstance(arg, Dynamic):
            if has_c:
                break  # the command string itself: reported below
            return [_unknown(cmd.text, "a shell option or script is computed at run time", argv)]
        if arg == "--" or not arg.startswith(("-", "+")) or arg in ("-", "+"):
            i += 1 if arg == "--" else 0
            break
        if arg.startswith("--"):
            i += 2 if arg in ("--rcfile", "--init-file") else 1
            continue
        has_c = has_c or (arg[0] == "-" and "c" in arg[1:])
        i += 2 if arg[-1] in "oO" else 1
    if not has_c:
        return [cmd]  # a script file or stdin: the rules decide about the shell itself
    if i >= len(argv):
        return [_unknown(cmd.text, "shell -c without a command string", argv)]
    script = argv[i]
    if isinstance(script, Dynamic):
        return [_unknown(cmd.text, "shell -c runs a string computed at run time", argv)]
    return _parse(script, depth + 1)


_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def _find(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    argv = cmd.argv
    out = [cmd]
    i = 1
    while i < len(argv):
        arg = argv[i]
        if isinstance(arg, Dynamic) and arg.kind == MANY:
            return [_unknown(cmd.text, "find: an expanded word could add -exec", argv)]
        if arg in _FIND_EXEC:
            end = next((k for k in range(i + 1, len(argv)) if argv[k] in (";", "+")), None)
            inner = argv[i + 1 : end] if end is not None else ()
            if not inner:
                return [_unknown(cmd.text, f"find {arg} without a command", argv)]
            inner = tuple(Dynamic(ONE, w) if isinstance(w, str) and "{}" in w else w
                          for w in inner)
            out.extend(_resolve(inner, cmd.text, depth))
            i = end + 1 if end is not None else len(argv)
            continue
        i += 1
    return out


_XARGS_FLAGS = frozenset({"-0", "-r", "-t", "-p", "-x", "-o", "--null", "--no-run-if-empty",
                          "--verbose", "--interactive", "--exit", "--open-tty"})
_XARGS_WITH_ARG = frozenset({"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file",
                             "--delimiter", "--eof", "--replace", "--max-lines", "--max-args",
                             "--max-procs", "--max-chars", "--process-slot-var"})


def _xargs(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    argv = cmd.argv
    try:
        start = _options(argv, flags=_XARGS_FLAGS, with_arg=_XARGS_WITH_ARG)
    except _Unknowable as exc:
        return [_unknown(cmd.text, f"xargs: {exc}", argv)]
    replace: Word | None = None
    for k in range(1, start):
        arg = argv[k]
        if arg in ("-I", "--replace") and k + 1 < start:
            replace = argv[k + 1]
        elif isinstance(arg, str) and arg.startswith(("-I", "--replace=")):
            replace = arg.removeprefix("-I").removeprefix("--replace=")
    inner: tuple[Word, ...] = argv[start:] or ("echo",)
    if isinstance(replace, str):
        inner = tuple(Dynamic(ONE, w) if isinstance(w, str) and replace in w else w
                      for w in inner)
    # xargs appends words read from stdin: any number of them. Like the wrappers, xargs itself
    # is transparent: what matters is the command it runs.
    inner = (*inner, Dynamic(MANY, "<stdin words>"))
    return _resolve(inner, cmd.text, depth)
