"""A shell command line → every simple command it would run, as far as can be known statically.

tree-sitter-bash gives the syntax tree; this module walks it through pipelines, ``&&``/``||``/``;``
lists, subshells, compound statements, function bodies, ``$(…)``/backticks, process
substitutions, redirections and heredocs, and parses ``bash -c '…'`` / ``sh -c`` with a literal
string recursively. Wrappers that only change *how* a command runs (``command``, ``env``,
``exec``, ``nohup``, ``timeout``, ``nice``, ``time``, ``stdbuf``, ``builtin``) and ``xargs`` are
unwrapped to the command they run; ``sudo``/``doas`` and ``find -exec`` yield both themselves
and the command they launch. A launcher whose command is not literal is UNKNOWN.

Ordinary programs with options that run another command are treated the same way (see
:data:`_LAUNCHING`): ``sort --compress-program=X``, ``tar --to-command=X`` / ``-I X`` /
``--checkpoint-action=exec=X`` / ``-F X``, ``git rebase --exec X``, ``git grep -OX``,
``git fetch|pull|clone|ls-remote --upload-pack=X``, ``git bisect run X…``,
``git submodule foreach X``, ``git difftool -x X``, ``zip -TT X``, ``rsync -e X``, ``man -P X``,
``rg --pre X``, ``ag --pager X`` and ``fd -x X…`` yield the program itself *and* the commands X
runs (a literal X is parsed as shell; a computed one is UNKNOWN), so the strictest decision
applies. Long options are recognised by any prefix, as getopt accepts abbreviations. Scripts in
a language of their own are read for the parts that run or write: a ``sed`` script with ``e``,
``s///e``, ``w`` / ``W`` or ``s///w`` (except to /dev/stdout and /dev/stderr), an ``awk``
program with ``system``, a pipe, an output redirection or ``@``, a script read from a file,
``less`` startup commands and lesskey files are UNKNOWN. So are ``read``, ``printf -v`` and
``declare -n`` writing a variable that changes what programs run.

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

import functools
import itertools
import posixpath
import re
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from policies import package_managers
from policies.shell_arith import hazards
from policies.shell_words import (
    MANY,
    ONE,
    RISKY_VARS,
    Dynamic,
    SimpleCommand,
    Word,
    Write,
    node_text,
    unknown,
    word,
)
from policies.shell_writes import NOT_FILES, program_writes
from sandloop.files import PatchKind

# The grammar is loaded by the first parse, not on import: a decision that parses no command
# line (a patch, a URL) or a command that never decides (``sandloop --version``) skips it.
if TYPE_CHECKING:
    from tree_sitter import Language, Node, Parser, Tree

__all__ = ["MANY", "ONE", "Dynamic", "SimpleCommand", "Word", "Write", "parse"]

_local = threading.local()  # one Parser per thread: Parser objects are not shareable

# Directories whose programs are the system's own: "/usr/bin/rm" is rm. A path anywhere else
# ("./rm", "/tmp/x/rm") names a file that may have been written by the model, so its basename is
# used for strict rules but never to allow it.
_SYSTEM_DIRS = frozenset(
    {"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin",
     # An environment's prefix (its venv, its tools), first on PATH: written by the operator's
     # setup, on the image's read-only root in the agent phase, so no more the model's than /usr/bin.
     "/opt/env/bin"}
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
_MAX_DEPTH = 8  # nested `sh -c` levels before giving up (UNKNOWN)


#: Lines up to this long are parsed once per process (an agent repeats its commands: ``pytest``,
#: ``git status``); a parse costs 0.2–1 ms, a hit microseconds. Longer ones are rare and large.
CACHED_LINE_MAX = 4096


#: Bounds on what is read at all (a line past one is UNKNOWN, so asked about, or denied when no
#: one can be asked): its size, its syntax tree's nodes, and how deep the tree nests. They keep a
#: decision's time in proportion to the line and well under a second, and the recursive walk off
#: Python's stack limit; an agent's real command lines stay far below each.
MAX_LINE_BYTES = 64 * 1024
MAX_NODES = 10_000
MAX_NESTING = 100


def parse(command_line: str) -> list[SimpleCommand]:
    """Every simple command ``command_line`` runs, in source order, with the files each writes.
    The line runs at the workspace root."""
    if len(command_line) <= CACHED_LINE_MAX:
        return list(_parse_cached(command_line))
    return _parse_bounded(command_line)


@functools.lru_cache(maxsize=1024)
def _parse_cached(command_line: str) -> tuple[SimpleCommand, ...]:
    # A parse depends on the line alone, and what it yields is immutable (frozen dataclasses,
    # tuples): one result can be handed to every caller.
    return tuple(_parse_bounded(command_line))


def _parse_bounded(command_line: str) -> list[SimpleCommand]:
    try:
        return _parse(command_line, 0, frozenset({""}))
    except RecursionError:
        # Each level is checked against MAX_NESTING, but `sh -c` strings nest trees in trees:
        # whatever still runs out of stack is too deep to follow.
        return [unknown(command_line, f"nested too deeply to check (over {MAX_NESTING} levels)")]


def _too_big(tree: Tree) -> str | None:
    """Why a parsed line is past the bounds on its tree (None: it is not)."""
    nodes = tree.root_node.descendant_count
    if nodes > MAX_NODES:
        return f"the command line has {nodes} syntax nodes, over the {MAX_NODES} that are checked"
    if nodes > MAX_NESTING and _deeper_than(tree, MAX_NESTING):
        return f"the command line nests over {MAX_NESTING} levels deep"
    return None


def _deeper_than(tree: Tree, limit: int) -> bool:
    """Does the syntax tree nest deeper than ``limit``? (a walk that stops as soon as it does)"""
    cursor = tree.walk()
    depth = 0
    while True:
        if cursor.goto_first_child():
            depth += 1
            if depth > limit:
                return True
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return False
            depth -= 1


@functools.cache
def _language() -> Language:
    import tree_sitter_bash
    from tree_sitter import Language

    return Language(tree_sitter_bash.language())


def _parser() -> Parser:
    parser: Parser | None = getattr(_local, "parser", None)
    if parser is None:
        from tree_sitter import Parser

        parser = _local.parser = Parser(_language())
    return parser


def _parse(command_line: str, depth: int, cwds: frozenset[str] | None = None) -> list[SimpleCommand]:
    if depth > _MAX_DEPTH:
        return [unknown(command_line, "shell -c nested too deeply to follow")]
    source = command_line.encode()
    if len(source) > MAX_LINE_BYTES:  # not even parsed: the parser's time grows with the line
        return [unknown(command_line, f"the command line is {len(source)} bytes, over the "
                                      f"{MAX_LINE_BYTES} that are checked")]
    tree = _parser().parse(source)
    too_big = _too_big(tree)
    if too_big is not None:
        return [unknown(command_line, too_big)]
    if tree.root_node.has_error:
        return [unknown(command_line, "the command line does not parse as shell")]
    inherited = _context.tainted[-1] if _context.tainted else frozenset()
    reasons, tainted = hazards(tree.root_node, inherited)
    out = [unknown(command_line, reason) for reason in reasons]
    _context.tainted.append(tainted)  # what a `bash -c` inside this line inherits
    try:
        _Walker(out, depth, cwds).visit(tree.root_node)
    finally:
        _context.tainted.pop()
    return out


class _Context(threading.local):
    def __init__(self) -> None:
        self.tainted: list[frozenset[str]] = []


_context = _Context()


def _adjacent_words(node: Node) -> list[tuple[str, list[Node]]]:
    """The shell words of a declaration's arguments: tree-sitter splits ``PA'TH'=x`` into parts;
    parts with nothing between them are one word (text, parts)."""
    groups: list[tuple[str, list[Node]]] = []
    end = -1
    for child in node.named_children:
        if groups and child.start_byte == end:
            text, parts = groups[-1]
            groups[-1] = (text + node_text(child), [*parts, child])
        else:
            groups.append((node_text(child), [child]))
        end = child.end_byte
    return groups


_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")


def _declared_name(text: str) -> str | None:
    """The variable a declaration argument assigns (``NAME=…``), as bash reads the word; None
    when it assigns nothing; ValueError when the name is computed at run time."""
    plain = _PLAIN_NAME.match(text)
    if plain is not None:
        return plain.group(0).rstrip("+=").split("[", 1)[0]
    if "$" in text or "`" in text:
        raise ValueError(text)
    try:
        (value,) = shlex.split(text)
    except ValueError:
        raise ValueError(text) from None
    if "=" not in value:
        return None
    return value.split("=", 1)[0].rstrip("+").split("[", 1)[0]


class _Walker:
    def __init__(self, out: list[SimpleCommand], depth: int, cwds: frozenset[str] | None) -> None:
        self.out = out
        self.depth = depth
        #: where the shell may be, relative to the workspace root (None: unknown). Only ever
        #: grows: a `cd` that fails, or one inside a subshell, leaves the old place possible.
        self.cwds = cwds
        #: where the last command went, when it was a `cd`: after `cd X &&` the shell is in X
        self._last_cd: frozenset[str] | None = None

    def visit(self, node: Node) -> None:
        kind = node.type
        if kind == "command":
            self._command(node)
        elif kind == "variable_assignment":
            self._assignment(node)
            self._children(node)
        elif kind == "declaration_command":
            self._declaration(node)
            self._children(node)
        elif kind == "file_redirect":
            self._redirect(node)
            self._children(node)
        elif kind == "list":
            self._list(node)
        elif kind == "redirected_statement" and node.named_children and node.named_children[0].type == "list":
            # tree-sitter hangs `a && b > f` off the whole list; bash gives `> f` to b alone
            body, *redirects = node.named_children
            self._list(body, redirects)
        else:
            # Everything else (lists, pipelines, subshells, if/for/while/case, function bodies,
            # heredoc bodies, substitutions inside words) is walked for the commands it
            # contains. A quoted heredoc body has no children, so it runs nothing.
            self._children(node)

    def _children(self, node: Node) -> None:
        for child in node.named_children:
            self.visit(child)

    def _list(self, node: Node, redirects: list[Node] | None = None) -> None:
        """``A && B``: B runs only if A succeeded, so after ``cd X && …`` the shell is in X
        (with ``;`` a failed cd leaves it where it was: both places stay possible).
        ``redirects`` belong to B (see visit)."""
        left, right = node.named_children[0], node.named_children[-1]
        operator = next((c.type for c in node.children if not c.is_named), "")
        self.visit(left)
        moved = self._last_cd
        if operator == "&&" and moved is not None and self.cwds is not None:
            before = self.cwds
            self.cwds = moved
            self._right(right, redirects or [])
            self.cwds = None if self.cwds is None else _bounded(before | self.cwds)
        else:
            self._right(right, redirects or [])

    def _right(self, node: Node, redirects: list[Node]) -> None:
        if node.type == "list" and redirects:
            self._list(node, redirects)
            return
        self.visit(node)
        for redirect in redirects:
            self.visit(redirect)

    def _assignment(self, node: Node) -> None:
        name = node.child_by_field_name("name")
        if name is not None and name.type == "subscript":
            name = name.child_by_field_name("name")  # PATH[0]=x assigns PATH
        if name is not None and RISKY_VARS.match(node_text(name)):
            self.out.append(
                unknown(node_text(node), f"assigns {node_text(name)}, which can change what programs run")
            )

    def _declaration(self, node: Node) -> None:
        """export/declare/typeset/local/readonly: a risky variable is risky however it is quoted
        (``export 'PATH=…'``, ``export PA\\TH=…``), and a name computed at run time could be any."""
        text = node_text(node)
        for word_text, parts in _adjacent_words(node):
            if parts[0].type == "variable_assignment":
                continue  # a plain NAME=value: _assignment decides it
            if re.fullmatch(r"[-+]\w*n\w*", word_text):
                # `declare -n ref=PATH; ref=x` assigns PATH through a name no assignment shows
                self.out.append(unknown(text, "a nameref (-n) can assign any variable"))
                return
            if word_text.startswith(("-", "+")):
                continue
            try:
                name = _declared_name(word_text)
            except ValueError:
                self.out.append(unknown(text, f"declares a variable whose name is computed at run time "
                                              f"({word_text})"))
                return
            if name is not None and RISKY_VARS.match(name):
                self.out.append(unknown(text, f"assigns {name}, which can change what programs run"))
                return

    def _redirect(self, node: Node) -> None:
        """``> FILE``, ``>> FILE``, ``&> FILE``, ``>| FILE``, ``>& FILE``: a write to FILE."""
        operators = [c.type for c in node.children if not c.is_named]
        destination = node.child_by_field_name("destination")
        if destination is None or not any(">" in op for op in operators):
            return
        target = word(destination)
        if ">&" in operators and isinstance(target, str) and re.fullmatch(r"\d+|-", target):
            return  # 2>&1: a descriptor, not a file
        if isinstance(target, str) and NOT_FILES.match(target):
            return
        # `>>` and `<>` may keep the file; `>` `>|` `&>` replace or create it
        kind: PatchKind = "update_file" if any(op in (">>", "&>>", "<>") for op in operators) else "create_file"
        write = Write(target, kind, self.cwds, " ".join(operators) + " " + str(target))
        self.out.append(SimpleCommand(argv=(), text=node_text(node), writes=(write,)))

    def _command(self, node: Node) -> None:
        words: list[Word] = []
        for child in node.named_children:
            # Substitutions inside any part (name, arguments, assignments, redirects) run too.
            self.visit(child)
            if child.type == "command_name":
                words.append(word(child.named_children[0]) if child.named_children else "")
            elif child.type not in ("variable_assignment", "file_redirect", "heredoc_redirect",
                                    "herestring_redirect"):
                words.append(word(child))
        for cmd in _resolve(tuple(words), node_text(node), self.depth, self.cwds):
            if cmd.writes is None:
                cmd = replace(cmd, writes=tuple(Write(path, kind, self.cwds, how)
                                                for path, kind, how in program_writes(cmd.argv)))
            self.out.append(cmd)
            self._follow_cd(cmd)

    def _follow_cd(self, cmd: SimpleCommand) -> None:
        self._last_cd = None
        if cmd.name not in ("cd", "pushd", "popd"):
            return
        operands = [a for a in cmd.argv[1:] if not (isinstance(a, str) and a.startswith("-") and a != "-")]
        target = operands[0] if operands else None
        if cmd.name == "popd" or target == "-" or isinstance(target, Dynamic) or self.cwds is None:
            self.cwds = None
            return
        if target is None:
            moved = frozenset({_OUTSIDE})  # HOME: outside the workspace
        else:
            moved = frozenset(_relative(posixpath.join("/workspace", c, target)) for c in self.cwds)
        self.cwds = _bounded(self.cwds | moved)
        self._last_cd = moved


_OUTSIDE = "../"  # any directory outside the workspace
#: Places the shell may be in that are followed; past this many it may be anywhere (None). Each
#: `cd` that may fail doubles them (`cd a; cd b; …`): unbounded, twenty of them cost a million.
MAX_PLACES = 16


def _bounded(cwds: frozenset[str]) -> frozenset[str] | None:
    return cwds if len(cwds) <= MAX_PLACES else None


def _relative(path: str) -> str:
    """A container path as a workspace-relative one (``../`` for anything outside it)."""
    normal = posixpath.normpath(path)
    if normal == "/workspace":
        return ""
    if normal.startswith("/workspace/"):
        return normal[len("/workspace/"):]
    return _OUTSIDE


# --- programs, wrappers and launchers ----------------------------------------------------------


def _normalise(program: str) -> tuple[str, bool]:
    """(name used for matching, whether that name can be trusted)."""
    if "/" not in program:
        return program, True
    path = posixpath.normpath("/" + program.lstrip("/")) if program.startswith("/") else program
    directory, base = posixpath.split(path)
    return base, directory in _SYSTEM_DIRS


def _resolve(argv: tuple[Word, ...], text: str, depth: int,
             cwds: frozenset[str] | None = None) -> list[SimpleCommand]:
    """Turn one command's words into the simple commands it runs (unwrapping wrappers).
    ``cwds``: where the shell may be, for a ``bash -c`` that inherits it."""
    out: list[SimpleCommand] = []
    while True:
        if not argv:
            return out  # only assignments/redirections: runs no program
        first = argv[0]
        if isinstance(first, Dynamic):
            out.append(unknown(text, "the program name is computed at run time", argv))
            return out
        name, trusted = _normalise(first)
        argv = (name, *argv[1:])
        cmd = SimpleCommand(argv=argv, text=text, program=first, trusted_name=trusted)
        if not trusted:
            out.append(cmd)
            return out
        if name in _CODE_RUNNERS and (len(argv) > 1 or name in ("eval", "source", ".")):
            out.append(unknown(text, _CODE_RUNNERS[name], argv))
            return out
        if name in _SHELLS:
            out.extend(_shell(cmd, depth, cwds))
            return out
        if name == "find":
            out.extend(_find(cmd, depth))
            return out
        if name == "xargs":
            out.extend(_xargs(cmd, depth))
            return out
        launching = _LAUNCHING.get(name)
        if launching is not None:
            out.extend(launching(cmd, depth))
            return out
        step = _WRAPPERS.get(name)
        if step is None:
            out.extend(_spelled(cmd, depth))
            return out
        try:
            start = step(argv)
        except _Unknowable as exc:
            out.append(unknown(text, f"{name}: {exc}", argv))
            return out
        if name == "exec" and start is not None and start < len(argv) and _login_exec(argv[:start]):
            runs = argv[start]
            if isinstance(runs, str) and _normalise(runs)[0] in _SHELLS:
                out.append(unknown(text, _STARTUP, argv))  # `exec -l bash`: argv[0] "-bash": login
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


def _login_exec(options: tuple[Word, ...]) -> bool:
    """``exec -l`` or ``exec -a -NAME``: the shell it runs starts as a login shell."""
    words = [w for w in options[1:] if isinstance(w, str)]
    if any(w.startswith("-") and not w.startswith("--") and "l" in w for w in words):
        return True
    return any(a == "-a" and b.startswith("-") for a, b in itertools.pairwise(words))


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
            if RISKY_VARS.match(name):
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


_STARTUP = ("an interactive or login shell first runs start-up files (~/.bashrc, ~/.profile, "
            "--rcfile), which the sandbox can write")


def _shell(cmd: SimpleCommand, depth: int, cwds: frozenset[str] | None) -> list[SimpleCommand]:
    """`bash -c 'literal'` is parsed recursively (in the directory the outer line is in);
    `bash script.sh` stays a bash command; an interactive or login shell is unknown."""
    argv = cmd.argv
    has_c = False
    i = 1
    while i < len(argv):
        arg = argv[i]
        if isinstance(arg, Dynamic):
            if has_c:
                break  # the command string itself: reported below
            return [unknown(cmd.text, "a shell option or script is computed at run time", argv)]
        if arg == "--" or not arg.startswith(("-", "+")) or arg in ("-", "+"):
            i += 1 if arg == "--" else 0
            break
        if arg.startswith("--"):
            if arg in ("--login", "--rcfile", "--init-file", "--interactive") or arg.startswith(
                    ("--rcfile=", "--init-file=")):
                return [unknown(cmd.text, _STARTUP, argv)]
            i += 1
            continue
        letters = arg[1:]
        if arg[0] == "-" and ("i" in letters or "l" in letters):
            return [unknown(cmd.text, _STARTUP, argv)]
        has_c = has_c or (arg[0] == "-" and "c" in letters)
        i += 2 if arg[-1] in "oO" else 1
    if not has_c:
        return [cmd]  # a script file or stdin: the rules decide about the shell itself
    if i >= len(argv):
        return [unknown(cmd.text, "shell -c without a command string", argv)]
    script = argv[i]
    if isinstance(script, Dynamic):
        return [unknown(cmd.text, "shell -c runs a string computed at run time", argv)]
    return _parse(script, depth + 1, cwds)


def _spelled(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    """A package manager's command word as every command it may spell (``npm publ`` is
    ``npm publish``); ``npm explore PKG -- CMD`` runs CMD."""
    out: list[SimpleCommand] = []
    for argv in package_managers.spellings(cmd.argv):
        out.append(replace(cmd, argv=argv))
        if argv[:2] == ("npm", "explore") and "--" in argv:
            inner = argv[argv.index("--") + 1:]
            out.extend(_resolve(inner, cmd.text, depth) if inner else
                       [unknown(cmd.text, "npm explore -- without a command", argv)])
    return out


_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def _find(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    argv = cmd.argv
    out = [cmd]
    i = 1
    while i < len(argv):
        arg = argv[i]
        if isinstance(arg, Dynamic) and arg.kind == MANY:
            return [unknown(cmd.text, "find: an expanded word could add -exec", argv)]
        if arg in _FIND_EXEC:
            end = next((k for k in range(i + 1, len(argv)) if argv[k] in (";", "+")), None)
            inner = argv[i + 1 : end] if end is not None else ()
            if not inner:
                return [unknown(cmd.text, f"find {arg} without a command", argv)]
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
        return [unknown(cmd.text, f"xargs: {exc}", argv)]
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


# --- programs whose options run other commands -------------------------------------------------
#
# Each handler returns the command itself followed by the commands its options run. An option
# value that is a command is parsed as a shell command line (tools hand most of them to
# `sh -c`; for those that split it themselves, shell parsing finds at least the same program).


def _runs(cmd: SimpleCommand, value: Word | None, what: str, depth: int) -> list[SimpleCommand]:
    """The commands that ``what`` runs when its value is ``value`` (None: chosen by config)."""
    if value is None:
        return [unknown(cmd.text, f"{what} runs a command named by configuration", cmd.argv)]
    if isinstance(value, Dynamic):
        return [unknown(cmd.text, f"{what} runs a command computed at run time", cmd.argv)]
    if not value.strip():
        return [unknown(cmd.text, f"{what} without a command", cmd.argv)]
    return _parse(value, depth + 1)


def _may_be_option(word: Dynamic) -> bool:
    """Could a run-time word start with '-' (and so be read as an option)? Only a word whose
    source starts with a plain character is known not to."""
    return not re.match(r"[A-Za-z0-9_./,:@%+=]", word.text)


@dataclass(frozen=True)
class _Options:
    """Which options of a program take a command (or a file of commands) as their value."""

    long: frozenset[str] = frozenset()  # matched by any prefix, as getopt_long accepts
    short: str = ""  # short options whose value (attached, or the next word) is a command
    short_arg: str = ""  # other short options that take a value, so end a cluster
    exact: frozenset[str] = frozenset()  # other long options that are prefixes of those above
    optional: frozenset[str] = frozenset()  # of the above: the value is optional and attached


def _command_options(
    argv: tuple[Word, ...], start: int, spec: _Options
) -> list[tuple[str, Word | None, int]]:
    """(option, value, index after it) for each command-running option in ``argv[start:]``.

    An expanded word in option position could be any option: it is reported as ("?", word)."""
    found: list[tuple[str, Word | None, int]] = []
    i = start
    while i < len(argv):
        arg = argv[i]
        i += 1
        if isinstance(arg, Dynamic):
            if _may_be_option(arg):
                found.append(("?", arg, i))
            continue
        if arg == "--":
            break
        if arg.startswith("--"):
            key, eq, value = arg[2:].partition("=")
            hit = next((o for o in sorted(spec.long) if key and o.startswith(key)), None)
            if hit is None or key in spec.exact:
                continue
            if eq:
                found.append((hit, value, i))
            elif hit in spec.optional:
                found.append((hit, None, i))
            else:
                found.append((hit, argv[i] if i < len(argv) else "", i + 1))
                i += 1
            continue
        if not arg.startswith("-") or arg == "-":
            continue
        for j, letter in enumerate(arg[1:], start=2):
            if letter in spec.short:
                rest = arg[j:]
                if rest or letter in spec.optional:
                    found.append(("-" + letter, rest or None, i))
                else:
                    found.append(("-" + letter, argv[i] if i < len(argv) else "", i + 1))
                    i += 1
                break
            if letter in spec.short_arg:
                i += 0 if arg[j:] else 1  # the value is the next word
                break
    return found


def _run_options(cmd: SimpleCommand, start: int, spec: _Options, depth: int,
                 values: Callable[[str, Word], Word | None] | None = None) -> list[SimpleCommand]:
    out = [cmd]
    for option, value, _ in _command_options(cmd.argv, start, spec):
        what = f"{cmd.argv[0]} {option if option.startswith('-') else '--' + option}"
        if option == "?":
            out.append(unknown(cmd.text, f"{cmd.argv[0]}: a word computed at run time could be "
                                "an option that runs a command", cmd.argv))
            continue
        if values is not None and value is not None and not isinstance(value, Dynamic):
            value = values(option, value)
            if value == "":
                continue  # the option's value is not a command (e.g. --checkpoint-action=dot)
        out.extend(_runs(cmd, value, what, depth))
    return out


_SORT = _Options(long=frozenset({"compress-program"}), short_arg="kSTot")


def _sort(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    return _run_options(cmd, 1, _SORT, depth)


_TAR = _Options(
    long=frozenset({"to-command", "checkpoint-action", "use-compress-program", "info-script",
                    "new-volume-script", "rsh-command", "rmt-command"}),
    short="IF",
    short_arg="bCfgHKLNTVX",
    exact=frozenset({"checkpoint"}),
)
_TAR_OLD_ARGS = "bCfgHKLNTVXIF"  # old-style `tar xIf PROG a.tar`: letters that take the next words


def _tar_value(option: str, value: Word) -> Word | None:
    if option != "checkpoint-action":
        return value
    if isinstance(value, str):
        return value[5:] if value.startswith("exec=") else ""  # only exec= runs a command
    return value


def _tar(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    argv = cmd.argv
    out: list[SimpleCommand] = []
    start = 1
    first = argv[1] if len(argv) > 1 else None
    if isinstance(first, str) and first and not first.startswith("-"):
        # old style: the first word is a cluster of letters, their values follow in order
        start = 2
        for letter in first:
            if letter in _TAR_OLD_ARGS:
                value = argv[start] if start < len(argv) else ""
                if letter in "IF":
                    out.extend(_runs(cmd, value, f"tar {letter}", depth))
                start += 1
    return [*_run_options(cmd, start, _TAR, depth, _tar_value), *out]


# git: global options before the subcommand (the rules decide about -c / -C / --git-dir…; they
# are skipped here only to find the subcommand), then per-subcommand command-running options.
_GIT_GLOBAL_FLAGS = frozenset({"-p", "--paginate", "-P", "--no-pager", "--bare", "--no-replace-objects",
                               "--literal-pathspecs", "--glob-pathspecs", "--noglob-pathspecs",
                               "--icase-pathspecs", "--no-optional-locks", "--no-advice",
                               "--no-lazy-fetch"})
_GIT_GLOBAL_WITH_ARG = frozenset({"-c", "-C", "--git-dir", "--work-tree", "--namespace",
                                  "--exec-path", "--config-env", "--super-prefix"})
_GIT = {
    "rebase": _Options(long=frozenset({"exec"}), short="x", short_arg="sXC"),
    "grep": _Options(long=frozenset({"open-files-in-pager"}), short="O", short_arg="efABCm",
                     optional=frozenset({"open-files-in-pager", "O"})),
    "fetch": _Options(long=frozenset({"upload-pack"})),
    "pull": _Options(long=frozenset({"upload-pack"}), short="u"),
    "clone": _Options(long=frozenset({"upload-pack", "template", "config"}), short="uc",
                      short_arg="objs"),
    "ls-remote": _Options(long=frozenset({"upload-pack"}), short="u"),
    "push": _Options(long=frozenset({"receive-pack", "exec"})),
    "archive": _Options(long=frozenset({"exec"}), short_arg="o"),
    "fetch-pack": _Options(long=frozenset({"upload-pack", "exec"})),
    "send-pack": _Options(long=frozenset({"receive-pack", "exec"})),
    "difftool": _Options(long=frozenset({"extcmd"}), short="x", short_arg="t"),
}


def _git_value(option: str, value: Word) -> Word | None:
    # a clone's template directory brings hooks, and its config can name programs: what they
    # run cannot be read from the command line
    return None if option in ("template", "config", "-c") else value


def _git(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    argv = cmd.argv
    i = 1
    while i < len(argv):
        arg = argv[i]
        if not isinstance(arg, str) or not arg.startswith("-"):
            break
        key = arg.split("=", 1)[0]
        if arg in _GIT_GLOBAL_FLAGS or ("=" in arg and key in _GIT_GLOBAL_WITH_ARG):
            i += 1
        elif arg in _GIT_GLOBAL_WITH_ARG:
            i += 2
        else:
            return [cmd]  # an option this parser does not know: the rules decide
    if i >= len(argv) or not isinstance(argv[i], str):
        return [cmd]
    sub = argv[i]
    if sub == "bisect" and i + 1 < len(argv) and argv[i + 1] == "run":
        inner = argv[i + 2 :]
        if not inner:
            return [cmd, unknown(cmd.text, "git bisect run without a command", argv)]
        return [cmd, *_resolve(inner, cmd.text, depth)]
    if sub == "submodule":
        return [cmd, *_git_foreach(cmd, i + 1, depth)]
    spec = _GIT.get(str(sub))
    if spec is None:
        return [cmd]
    return _run_options(cmd, i + 1, spec, depth, _git_value)


def _git_foreach(cmd: SimpleCommand, i: int, depth: int) -> list[SimpleCommand]:
    argv = cmd.argv
    while i < len(argv) and argv[i] in ("-q", "--quiet"):
        i += 1
    if i >= len(argv) or argv[i] != "foreach":
        return []
    i += 1
    while i < len(argv) and argv[i] in ("--recursive", "-q", "--quiet", "--"):
        i += 1
    words = argv[i:]
    if any(isinstance(w, Dynamic) for w in words):
        return [unknown(cmd.text, "git submodule foreach runs a command computed at run time",
                         argv)]
    if not words:
        return [unknown(cmd.text, "git submodule foreach without a command", argv)]
    # git hands the first word to the shell as code, the rest as its arguments
    line = " ".join([str(words[0]), *(shlex.quote(str(w)) for w in words[1:])])
    return _runs(cmd, line, "git submodule foreach", depth)


_ZIP = _Options(long=frozenset({"unzip-command"}))


def _zip(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    argv = cmd.argv
    out = _run_options(cmd, 1, _ZIP, depth)
    for i, arg in enumerate(argv[1:], start=1):
        if isinstance(arg, str) and arg.startswith("-") and not arg.startswith("--") and "TT" in arg:
            rest = arg[arg.index("TT") + 2 :].lstrip("=")
            value = rest or (argv[i + 1] if i + 1 < len(argv) else "")
            out.extend(_runs(cmd, value, "zip -TT", depth))
    return out


_RSYNC = _Options(long=frozenset({"rsh", "rsync-path"}), short="e", short_arg="BfMT")
_MAN = _Options(long=frozenset({"pager", "html", "config-file"}), short="PHC",
                short_arg="eELmMprRSsT", optional=frozenset({"html", "H"}))
_RG = _Options(long=frozenset({"pre", "hostname-bin"}), short_arg="ABCEefgMmrTtjd")
_AG = _Options(long=frozenset({"pager"}), short_arg="ABCGgmp")


def _man_value(option: str, value: Word) -> Word | None:
    return None if option in ("config-file", "-C") else value  # a config file names programs


def _simple_options(spec: _Options, values: Callable[[str, Word], Word | None] | None = None
                    ) -> Callable[[SimpleCommand, int], list[SimpleCommand]]:
    def handler(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
        return _run_options(cmd, 1, spec, depth, values)

    return handler


_FD = _Options(long=frozenset({"exec", "exec-batch"}), short="xX", short_arg="eEtdScjo")


def _fd(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    """`fd PATTERN -x CMD ARGS… [;]` runs CMD for each path found, like find -exec."""
    argv = cmd.argv
    out = [cmd]
    for option, value, after in _command_options(argv, 1, _FD):
        if option == "?" or value is None or isinstance(value, Dynamic):
            return [unknown(cmd.text, "fd runs a command computed at run time", argv)]
        end = next((k for k in range(after, len(argv)) if argv[k] == ";"), len(argv))
        inner = tuple(Dynamic(ONE, w) if isinstance(w, str) and "{" in w else w
                      for w in (value, *argv[after:end]))
        out.extend(_resolve((*inner, Dynamic(ONE, "<path>")), cmd.text, depth))
    return out


def _less(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    """less runs its own commands given as +CMD (! and | among them) and reads lesskey files,
    which can set LESSOPEN."""
    for arg in cmd.argv[1:]:
        if isinstance(arg, Dynamic):
            if _may_be_option(arg) or arg.text.startswith("+"):
                return [unknown(cmd.text, "less: a word computed at run time could be a "
                                 "command", cmd.argv)]
            continue
        if arg == "--":
            break
        if arg.startswith("+") and not re.fullmatch(r"\+\+?(\d+|[GgF]|/[^!|]*)", arg):
            return [unknown(cmd.text, f"less runs the command {arg}", cmd.argv)]
        if arg.startswith("--lesskey") or re.fullmatch(r"-[^-]*k.*", arg):
            return [unknown(cmd.text, "less reads a lesskey file, which can set LESSOPEN",
                             cmd.argv)]
    return [cmd]


# sed: the program text, read for the commands that run programs or write files.
_SED_SHORT_ARG = "eflL"
_SED_FLAGS = frozenset("nrEsuzbi")
_SED_STDIO = frozenset({"/dev/stdout", "/dev/stderr"})


class _SedScript:
    """A scanner for GNU sed scripts that finds `e`, `s///e` and writes (`w`, `W`, `s///w`).
    Anything it does not recognise raises _Unknowable: better a prompt than a miss."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def _peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def _rest_of_line(self) -> str:
        end = self.text.find("\n", self.i)
        end = len(self.text) if end < 0 else end
        line, self.i = self.text[self.i : end], end
        return line

    def _delimited(self, delimiter: str) -> None:
        """Skip to just past the next unescaped ``delimiter``."""
        while self.i < len(self.text):
            c = self.text[self.i]
            self.i += 2 if c == "\\" else 1
            if c == delimiter:
                return
        raise _Unknowable("sed: an unterminated regular expression")

    def _address(self) -> None:
        c = self._peek()
        if c.isdigit():
            while self._peek().isdigit() or self._peek() == "~":
                self.i += 1
        elif c == "$":
            self.i += 1
        elif c in ("/", "\\"):
            if c == "\\":
                self.i += 1
            delimiter = self._peek()
            self.i += 1
            self._delimited(delimiter)
            while self._peek() in ("I", "M"):
                self.i += 1
        else:
            return
        if self._peek() == ",":
            self.i += 1
            if self._peek() in ("+", "~"):
                self.i += 1
            self._address()

    def effects(self) -> str | None:
        """Why the script runs a program or writes a file, or None."""
        text = self.text
        while True:
            while self._peek() and self._peek() in " \t\n;":
                self.i += 1
            c = self._peek()
            if not c:
                return None
            if c == "#":
                self._rest_of_line()
                continue
            self._address()
            while self._peek() in (" ", "\t", "!"):
                self.i += 1
            c = self._peek()
            self.i += 1
            if not c:
                raise _Unknowable("sed: an address without a command")
            if c in "{}=dDgGhHlLnNpPqQxzF":
                while self._peek().isdigit():
                    self.i += 1  # q5, l 40
            elif c in ":btTv":
                while self.i < len(text) and text[self.i] not in ";\n":
                    self.i += 1
            elif c in "aicrR":
                # text (continued by a trailing backslash), or a file read: neither runs
                # nor writes
                line = self._rest_of_line()
                while line.endswith("\\") and self.i < len(text):
                    self.i += 1
                    line = self._rest_of_line()
            elif c in "wW":
                target = self._rest_of_line().strip()
                if target not in _SED_STDIO:
                    return f"sed writes the file {target or '?'}"
            elif c == "e":
                return "sed e runs a command"
            elif c in "sy":
                delimiter = self._peek()
                if not delimiter or delimiter in "\n\\":
                    raise _Unknowable("sed: a bad s or y command")
                self.i += 1
                self._delimited(delimiter)
                self._delimited(delimiter)
                if c == "s":
                    while self._peek() and self._peek() in "gpiImMe0123456789w":
                        flag = self._peek()
                        self.i += 1
                        if flag == "e":
                            return "sed s///e runs the pattern space as a command"
                        if flag == "w":
                            target = self._rest_of_line().strip()
                            if target not in _SED_STDIO:
                                return f"sed s///w writes the file {target or '?'}"
            else:
                raise _Unknowable(f"sed: unrecognised command {c!r}")


def _sed(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    argv = cmd.argv
    scripts: list[str] = []
    operands: list[Word] = []
    sandboxed = False
    i = 1
    try:
        while i < len(argv):
            arg = argv[i]
            i += 1
            if isinstance(arg, Dynamic):
                if _may_be_option(arg) or not (scripts or operands):
                    raise _Unknowable("the script or an option is computed at run time")
                operands.append(arg)
                continue
            if arg == "--":
                operands.extend(argv[i:])
                break
            if arg.startswith("--"):
                key, eq, value = arg[2:].partition("=")
                if key and "expression".startswith(key):
                    scripts.append(_literal(value if eq else argv[i]) if eq or i < len(argv) else "")
                    i += 0 if eq else 1
                elif key and "file".startswith(key):
                    raise _Unknowable("sed -f runs a script file this policy cannot read")
                elif key == "sandbox":
                    sandboxed = True  # GNU sed refuses e, w and r in sandbox mode
                elif key and "line-length".startswith(key) and not eq:
                    i += 1
                continue
            if not arg.startswith("-") or arg == "-":
                operands.append(arg)
                continue
            for j, letter in enumerate(arg[1:], start=2):
                if letter == "i":
                    break  # -i[SUFFIX]: the rest is the suffix
                if letter in _SED_SHORT_ARG:
                    value = arg[j:] or (_literal(argv[i]) if i < len(argv) else "")
                    i += 0 if arg[j:] else 1
                    if letter == "e":
                        scripts.append(value)
                    elif letter == "f":
                        raise _Unknowable("sed -f runs a script file this policy cannot read")
                    break
                if letter not in _SED_FLAGS:
                    raise _Unknowable(f"unrecognised option -{letter}")
        if not scripts:
            if not operands:
                return [cmd]
            scripts.append(_literal(operands[0]))
        why = None if sandboxed else _SedScript("\n".join(scripts)).effects()
    except _Unknowable as exc:
        return [unknown(cmd.text, f"sed: {exc}", argv)]
    return [cmd] if why is None else [unknown(cmd.text, why, argv)]


_AWK_SOURCE_OPTIONS = re.compile(r"^-(f|-file|i|-include|l|-load|E|-exec|W|e|-source)")


def _awk(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    """An awk program runs commands only through system(), pipes (`| getline`, `print |`),
    and writes through `>`; gawk's @-calls and extensions load more. Any of those → UNKNOWN."""
    argv = cmd.argv
    i = 1
    while i < len(argv):
        arg = argv[i]
        if isinstance(arg, Dynamic):
            return [unknown(cmd.text, "awk: the program or an option is computed at run time",
                             argv)]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        if _AWK_SOURCE_OPTIONS.match(arg):
            return [unknown(cmd.text, f"awk {arg} runs a program this policy cannot read", argv)]
        if arg in ("-v", "-F", "--assign", "--field-separator"):
            i += 2
        elif arg.startswith(("-v", "-F", "--assign=", "--field-separator=")) or arg in (
                "-P", "--posix", "-c", "--traditional", "-S", "--sandbox", "-s"):
            i += 1
        else:
            return [unknown(cmd.text, f"awk: unrecognised option {arg}", argv)]
    if i >= len(argv):
        return [cmd]
    program = argv[i]
    if isinstance(program, Dynamic):
        return [unknown(cmd.text, "awk: the program is computed at run time", argv)]
    if re.search(r"system|[|>@]", program):
        return [unknown(cmd.text, "the awk program may run commands or write files (system, "
                         "a pipe, a redirection or an @-call)", argv)]
    return [cmd]


def _read_builtin(cmd: SimpleCommand, depth: int) -> list[SimpleCommand]:
    """`read PATH`, `printf -v PATH …`, `mapfile PATH` assign variables by name."""
    name = cmd.argv[0]
    words = cmd.argv[1:3] if name == "printf" else cmd.argv[1:]
    if name == "printf" and not (words and isinstance(words[0], str)
                                 and words[0].startswith("-v")):
        return [cmd]
    for given in words:
        if isinstance(given, Dynamic):
            return [unknown(cmd.text, f"{name} assigns a variable named at run time", cmd.argv)]
        target = given.removeprefix("-v") if name == "printf" else given
        if RISKY_VARS.match(target.split("[", 1)[0]):
            return [unknown(cmd.text, f"{name} assigns {target}, which can change what "
                             "programs run", cmd.argv)]
    return [cmd]


_LAUNCHING: dict[str, Callable[[SimpleCommand, int], list[SimpleCommand]]] = {
    "sort": _sort,
    "tar": _tar,
    "git": _git,
    "zip": _zip,
    "rsync": _simple_options(_RSYNC),
    "man": _simple_options(_MAN, _man_value),
    "rg": _simple_options(_RG),
    "ag": _simple_options(_AG),
    "fd": _fd,
    "fdfind": _fd,
    "less": _less,
    "sed": _sed,
    "gsed": _sed,
    "awk": _awk,
    "gawk": _awk,
    "mawk": _awk,
    "nawk": _awk,
    "read": _read_builtin,
    "printf": _read_builtin,
    "mapfile": _read_builtin,
    "readarray": _read_builtin,
    "getopts": _read_builtin,
}
