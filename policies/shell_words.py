"""The words and commands of a shell command line, as far as they are known before it runs.

A literal word is a ``str``; anything expanded at run time is a :class:`Dynamic` — ``ONE`` when
it is exactly one word (inside double quotes), ``MANY`` when word splitting or globbing can turn
it into any number of words. A :class:`SimpleCommand` is one program invocation, with the files
it writes (:class:`Write`) where they can be read from the command line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from sandloop.files import PatchKind

if TYPE_CHECKING:  # the parser itself is loaded by the first parse (policies.shell_parse)
    from tree_sitter import Node

__all__ = ["MANY", "ONE", "RISKY_VARS", "Dynamic", "SimpleCommand", "Word", "Write", "node_text",
           "unknown", "word"]

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
class Write:
    """A file the command line writes (a redirection, ``tee FILE``, ``cp … DEST`` …).

    ``path`` is as written (a Dynamic when computed at run time); a relative path is relative to
    one of ``cwds`` — the workspace-relative directories the shell may be in at that point (``""``
    is the workspace root), or None when that cannot be known (``cd "$X"``)."""

    path: Word
    kind: PatchKind
    cwds: frozenset[str] | None = frozenset({""})
    how: str = ""  # "> FILE", "tee", "cp destination" … for explain


@dataclass(frozen=True)
class SimpleCommand:
    """One program invocation the command line would make (or, with no argv, a redirection of a
    compound statement: only its writes)."""

    argv: tuple[Word, ...]  # argv[0] is the normalised program name when it is known
    text: str  # the source text of the command, for display
    program: str = ""  # argv[0] as written (e.g. "/bin/rm", "\\rm")
    unknown: str | None = None  # why this command cannot be known statically
    trusted_name: bool = True  # False for "./git": the name says git, the file may be anything
    #: the files it writes; None until the walker has read them from its words
    writes: tuple[Write, ...] | None = None

    @property
    def name(self) -> str | None:
        first = self.argv[0] if self.argv else None
        return first if isinstance(first, str) else None


# Assignments that change which program runs, make a program run another one, or make bash
# itself run code: bash's own tables (BASH_CMDS[ls]=/bin/rm, BASH_ALIASES), its start-up and
# trace hooks (BASH_ENV, PS0-PS4, PROMPT_COMMAND), the loader's and the interpreters' search
# paths and option variables, and what git, pagers and editors read.
RISKY_VARS = re.compile(
    r"^(PATH|IFS|ENV|BASH\w*|PS\d|PROMPT_COMMAND|SHELLOPTS|POSIXLY_CORRECT|EXECIGNORE|CDPATH"
    r"|LD_\w*|GCONV_PATH|LOCPATH|OPENSSL_\w*|GIT_\w*|PAGER|MANPAGER|MANOPT|EDITOR|VISUAL|LESSOPEN"
    r"|LESSCLOSE|LESS|LESSKEY\w*|PYTHON\w*|NODE_OPTIONS|NODE_PATH|PERL5\w*|PERLLIB|RUBYOPT|RUBYLIB"
    r"|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|JDK_JAVA_OPTIONS|RSYNC_RSH|RSYNC_CONNECT_PROG|RIPGREP_CONFIG_PATH"
    r"|BROWSER|SHELL|TAR_OPTIONS|SSH_ASKPASS|SUDO_ASKPASS|XDG_CONFIG_HOME|XDG_DATA_HOME|HOME|GNUPGHOME"
    r"|NPM_CONFIG_\w*|npm_config_\w*|PIP_\w*|INPUTRC|TERMINFO|HISTFILE|MAILPATH|MAILCHECK|FPATH)$"
)


def unknown(text: str, reason: str, argv: tuple[Word, ...] = ()) -> SimpleCommand:
    return SimpleCommand(argv=argv, text=text, program=str(argv[0]) if argv else "", unknown=reason)


def node_text(node: Node) -> str:
    return node.text.decode(errors="replace") if node.text is not None else ""


# --- words -------------------------------------------------------------------------------------

_GLOB = re.compile(r"(?<!\\)[*?]|(?<!\\)\[.*\]")
_BRACE = re.compile(r"(?<!\\)\{[^}]*(,|\.\.)[^}]*\}")  # {a,b} and {1..3}; a bare {} is literal
_DQ_ESCAPE = re.compile(r'\\([\\"$`\n])')
_UNQUOTED_ESCAPE = re.compile(r"\\(.)", re.S)


def _unescape_unquoted(text: str) -> str:
    return _UNQUOTED_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def word(node: Node) -> Word:
    """The value of one word node: a literal string, or Dynamic when it depends on run time."""
    kind = node.type
    text = node_text(node)
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
    parts = [word(c) for c in children]
    edges = [node.start_byte] + [b for c in children for b in (c.start_byte, c.end_byte)]
    if edges[1::2] != edges[0:-1:2] or edges[-1] != node.end_byte:
        return Dynamic(MANY, text)  # a part the grammar did not name sits in the word: be careful
    if _BRACE.search(text):
        return Dynamic(MANY, text)  # brace expansion across parts: {a,"b"}
    dynamic = [p for p in parts if isinstance(p, Dynamic)]
    if not dynamic:
        return "".join(p for p in parts if isinstance(p, str))
    return Dynamic(MANY if any(p.kind == MANY for p in dynamic) else ONE, text)


