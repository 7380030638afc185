"""Decisions: allow / prompt / deny, with the rule that decided, where it is written, and why.

Shell command lines are parsed into simple commands (:mod:`policies.shell_parse`); each is
decided by the first rule whose pattern matches, and the line by the strictest of them. Words
known only at run time make matching uncertain, and uncertainty is resolved towards the
stricter side: every rule that *might* be the first to match is a possible outcome, up to the
first rule that matches *whatever* the words turn out to be (or the default), and the strictest
possible outcome wins. So ``git $(echo push)`` is decided as strictly as ``git push``. A command
that cannot be known at all (``eval``, a computed program name…) is never allowed: it gets the
shell default, raised to ``prompt`` when the default is ``allow``.

An ``unattended`` policy (no human to ask, e.g. CI) turns every ``prompt`` into ``deny``.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import unquote, urlsplit

from policies import shell_parse
from policies.compiled import DECIDING, KeyPath, PolicyView, RuleView, decided_paths
from policies.paths import names_preset
from policies.problems import PolicyLoadError, Problem
from policies.shell_words import MANY, Dynamic, SimpleCommand, Word, Write
from sandloop.errors import NotAnAddress, PolicyDenied, describe
from sandloop.matching import (
    default_port,
    glob_match,
    host_entry,
    ip_literal,
    is_loopback_name,
    match_host,
)
from sandloop.verdict import Decision, Verdict

# The schema's models (pydantic) are loaded only with a policy file: deciding from a view that is
# already built (a snapshot, policies.snapshot) never needs them.
if TYPE_CHECKING:
    from policies.model import LoadedPolicy, Policy

__all__ = [
    "CompiledRule",
    "Decider",
    "Element",
    "PolicyEngine",
    "Words",
    "deny_text",
    "example_problems",
    "load_policy",
    "strictest",
]

_GLOB_CHARS = re.compile(r"[*?\[]")
_VERDICTS_KEPT = 1024


@dataclass(frozen=True)
class Words:
    """One pattern element that accepts certain words: literal ones, and word globs
    (:func:`fnmatch.fnmatchcase` semantics, one regex for all of them)."""

    literal: frozenset[str]
    globs: tuple[str, ...] = ()
    regex: re.Pattern[str] | None = None

    @classmethod
    def of(cls, words: Sequence[str]) -> Words:
        globs = tuple(w for w in words if _GLOB_CHARS.search(w))
        literal = frozenset(w for w in words if w not in globs)
        regex = re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs)) if globs else None
        return cls(literal, globs, regex)

    def __contains__(self, word: object) -> bool:
        if word in self.literal:
            return True
        return self.regex is not None and isinstance(word, str) and self.regex.match(word) is not None


# One pattern element: the words it accepts, or "*" (one word) / "**" (any number of words).
Element = Words | Literal["*", "**"]


def _compile(pattern: Sequence[str | list[str]]) -> tuple[Element, ...]:
    out: list[Element] = []
    for element in pattern:
        if element == "*":
            out.append("*")
        elif element == "**":
            out.append("**")
        else:
            out.append(Words.of(element if isinstance(element, list) else [element]))
    return tuple(out)


def _may_be(element: Element, word: Word) -> bool:
    """Could ``word`` (which may be run-time dynamic) fill this single-word element?"""
    return element == "*" or isinstance(word, Dynamic) or word in element


def _possible(pat: tuple[Element, ...], argv: tuple[Word, ...], i: int = 0, j: int = 0) -> bool:
    """Is there *some* value of the dynamic words for which the pattern matches argv?"""
    while True:
        if i == len(pat):
            return True  # a prefix: the argv may go on
        if pat[i] == "**":
            return any(_possible(pat, argv, i + 1, k) for k in range(j, len(argv) + 1))
        if j == len(argv):
            return False
        word = argv[j]
        if isinstance(word, Dynamic) and word.kind == MANY:
            # zero words, or this element's word (and maybe more from the same expansion)
            return _possible(pat, argv, i, j + 1) or _possible(pat, argv, i + 1, j)
        if not _may_be(pat[i], word):
            return False
        i, j = i + 1, j + 1


def _definite(pat: tuple[Element, ...], argv: tuple[Word, ...], i: int = 0, j: int = 0) -> bool:
    """Does the pattern match argv *whatever* the dynamic words turn out to be? (sound, simple:
    a dynamic word is only certainly matched by "*", an expansion only by "**")."""
    while True:
        if i == len(pat):
            return True
        if pat[i] == "**":
            return any(_definite(pat, argv, i + 1, k) for k in range(j, len(argv) + 1))
        if j == len(argv):
            return False
        word = argv[j]
        element = pat[i]
        if isinstance(word, Dynamic):
            if word.kind == MANY or element != "*":
                return False
        elif element != "*" and word not in element:
            return False
        i, j = i + 1, j + 1


@dataclass(frozen=True)
class CompiledRule:
    index: int
    rule: RuleView
    elements: tuple[Element, ...]
    source: str

    def may_match(self, cmd: SimpleCommand) -> bool:
        return bool(cmd.argv) and _possible(self.elements, cmd.argv)

    def matches(self, cmd: SimpleCommand) -> bool:
        """Certain match: never for unknown commands, nor for an untrusted "./git"."""
        return (
            cmd.unknown is None
            and cmd.trusted_name
            and bool(cmd.argv)
            and _definite(self.elements, cmd.argv)
        )

    def verdict(self) -> Verdict:
        return Verdict(self.rule.decision, self.rule.justification, self.rule.id, self.source)


_KINDS = {"create": "create", "update": "update", "delete": "delete"}


def strictest(verdicts: Sequence[Verdict]) -> Verdict:
    """The strictest verdict; between equally strict ones, a named rule over a section default
    (the rule is what the person reading `explain` needs to see)."""
    return max(verdicts, key=lambda v: (v.decision.strictness, not (v.rule_id or "").endswith(".default")))
_WORKSPACE = "/workspace"


def _write_paths(write: Write) -> list[str] | None:
    """The workspace-relative paths a write may land on (none when it lands outside the
    workspace), or None when that cannot be known."""
    path = write.path
    if isinstance(path, Dynamic):
        return None
    if path.startswith("/"):
        normal = posixpath.normpath(path)
        if normal == _WORKSPACE or normal.startswith(_WORKSPACE + "/"):
            return [normal[len(_WORKSPACE) + 1:] or "."]
        return []  # the sandbox's own /tmp and the like: not the workspace
    if write.cwds is None:
        return None
    out: list[str] = []
    for cwd in write.cwds:
        if cwd.startswith(".."):
            if ".." in path.split("/"):
                return None  # from somewhere outside, climbing back in: cannot tell where
            continue
        normal = posixpath.normpath(posixpath.join(cwd, path))
        if normal != ".." and not normal.startswith("../"):
            out.append(normal)
    return out


class Decider:
    """Answers for one effective policy, from its deciding keys (:class:`PolicyView`). Cheap to
    call: a shell decision is a parse and a scan."""

    def __init__(self, view: PolicyView) -> None:
        self.view = view
        self.rules = [
            CompiledRule(n, rule, _compile(rule.pattern), self.where(("shell", "rules", n)))
            for n, rule in enumerate(view.shell.rules)
        ]
        self._by_name: dict[str, list[CompiledRule]] = {}
        # The policy does not change under an engine, so a line's verdict does not either: an
        # agent repeats its commands, and a decision is asked for before every one of them.
        self._shell_verdicts: dict[str, Verdict] = {}

    # --- shell -----------------------------------------------------------------------------

    def shell(self, command_line: str) -> Verdict:
        """The strictest verdict among the simple commands the line runs."""
        verdict = self._shell_verdicts.get(command_line)
        if verdict is None:
            decided = self.explain_shell(command_line)
            if not decided:
                verdict = self._final(Verdict(Decision.ALLOW, "the command line runs no program"))
            else:
                verdict = strictest([verdict for _, verdict in decided])  # already final
            if len(command_line) <= shell_parse.CACHED_LINE_MAX:
                if len(self._shell_verdicts) >= _VERDICTS_KEPT:
                    self._shell_verdicts.clear()  # a bound, not an LRU: a session repeats few lines
                self._shell_verdicts[command_line] = verdict
        return verdict

    def explain_shell(self, command_line: str) -> list[tuple[SimpleCommand, Verdict]]:
        """Each simple command with its own (final) verdict, in source order."""
        return [(cmd, self._final(self.command(cmd))) for cmd in shell_parse.parse(command_line)]

    def command(self, cmd: SimpleCommand) -> Verdict:
        """One simple command's verdict before ``unattended`` is applied: its rule, and the
        ``[files]`` rules for every file it writes (the strictest decides)."""
        writes = [self.write(w) for w in cmd.writes or ()]
        if not cmd.argv and cmd.unknown is None:
            verdicts = writes or [Verdict(Decision.ALLOW, "runs no program")]
        else:
            verdicts = [self._program(cmd), *writes]
        return strictest(verdicts)

    # --- files a command writes ---------------------------------------------------------------

    def write(self, write: Write) -> Verdict:
        """May the shell write this file? The ``[files]`` rules, as for a patch, for every place
        the path may be; a path that cannot be known is asked about unless every path is writable."""
        paths = _write_paths(write)
        how = write.how or "a write"
        if paths is None:
            files = self.view.files
            if not files.read_only and "**" in files.writable and files.allow_create and files.allow_delete:
                return Verdict(Decision.ALLOW, f"{how}: every path is writable", "files.writable",
                               self.where(("files", "writable")))
            decision = Decision.PROMPT if files.default is not Decision.DENY or files.writable else Decision.DENY
            return Verdict(decision, f"{how}: which file it writes cannot be known before it runs, so the "
                           "[files] rules cannot be checked", "files.unknown_path",
                           self.where(("files",)))
        verdicts = [self.patch(path, write.kind) for path in paths]
        if not verdicts:
            return Verdict(Decision.ALLOW, f"{how}: outside the workspace", "files.outside")
        worst = strictest(verdicts)
        return replace(worst, justification=f"{how}: {worst.justification}")

    def _program(self, cmd: SimpleCommand) -> Verdict:
        """The rules' verdict on the program itself."""
        shell = self.view.shell
        default_source = self.where(("shell", "default"))
        if cmd.unknown is not None:
            decision = shell.default if shell.default is not Decision.ALLOW else Decision.PROMPT
            fallback = Verdict(
                decision, f"cannot be known before it runs ({cmd.unknown})", "shell.default", default_source
            )
        else:
            fallback = Verdict(shell.default, "no rule matches this command", "shell.default", default_source)
        outcomes: list[Verdict] = []
        for rule in self._candidates(cmd):
            if rule.matches(cmd):
                outcomes.append(rule.verdict())
                break
            if rule.may_match(cmd):
                outcomes.append(rule.verdict())
        else:
            outcomes.append(fallback)
        if cmd.unknown is not None:
            outcomes = [v for v in outcomes if v.decision is not Decision.ALLOW] + [fallback]
        return max(outcomes, key=lambda v: v.decision.strictness)

    def _candidates(self, cmd: SimpleCommand) -> list[CompiledRule]:
        name = cmd.argv[0] if cmd.argv else None
        if not isinstance(name, str):
            return [r for r in self.rules if not isinstance(r.elements[0], Words)]
        found = self._by_name.get(name)
        if found is None:
            found = self._by_name[name] = [
                r for r in self.rules
                if not isinstance(r.elements[0], Words) or name in r.elements[0]
            ]
        return found

    # --- files -----------------------------------------------------------------------------

    def patch(self, path: str, kind: str, *, size_bytes: int | None = None) -> Verdict:
        """May a patch ``kind`` (create_file / update_file / delete_file) touch ``path``?"""
        files = self.view.files
        op = _KINDS.get(kind.removesuffix("_file"))
        if op is None:
            raise ValueError(f"unknown patch kind {kind!r}")
        normal = posixpath.normpath(path.replace("\\", "/")).removeprefix("./")
        if normal.startswith(("/", "../")) or normal in ("..", ".", ""):
            return self._final(Verdict(Decision.DENY, f"{path} is not inside the workspace",
                                       "files.path", None))
        if size_bytes is not None and size_bytes > files.max_patch_bytes:
            return self._final(self._setting(
                Decision.DENY, ("files", "max_patch_bytes"),
                f"the patch is {size_bytes} bytes; the policy allows {files.max_patch_bytes}"))
        for n, glob in enumerate(files.read_only):
            # read-only globs compare without case: .GIT is .git on a case-insensitive disk
            if glob_match(glob, normal, fold_case=True):
                return self._final(self._setting(
                    Decision.DENY, ("files", "read_only", n),
                    f"{normal} is read-only (matches {glob!r})", "files.read_only"))
        if op == "create" and not files.allow_create:
            return self._final(self._setting(
                Decision.DENY, ("files", "allow_create"), "the policy does not allow creating files"))
        if op == "delete" and not files.allow_delete:
            return self._final(self._setting(
                Decision.DENY, ("files", "allow_delete"), "the policy does not allow deleting files"))
        for n, glob in enumerate(files.writable):
            if glob_match(glob, normal):
                return self._final(self._setting(
                    Decision.ALLOW, ("files", "writable", n),
                    f"{normal} is writable (matches {glob!r})", "files.writable"))
        return self._final(Verdict(files.default, f"{normal} matches no writable glob", "files.default",
                                   self.where(("files", "default"))))

    # --- browser ---------------------------------------------------------------------------

    def url(self, url: str) -> Verdict:
        browser = self.view.browser
        if url.strip() == "about:blank":
            return self._final(Verdict(Decision.ALLOW, "a blank page", "browser.about_blank"))
        # Parsers disagree about backslashes and control characters (a browser reads
        # "http://a\\@b" as host a, urllib as b), so such URLs are refused outright.
        if re.search(r"[\\\s\x00-\x1f\x7f]", url):
            return self._final(Verdict(Decision.DENY, "the URL has backslashes, spaces or control "
                                       "characters", "browser.url"))
        try:
            parts = urlsplit(url)
            # The browser percent-decodes a host before reading it (http://%31%32%37.0.0.1/ is
            # 127.0.0.1), then maps it through IDNA (fullwidth digits and dots become ASCII).
            host = unquote(parts.hostname or "", errors="strict")
            host = host.encode("idna").decode("ascii") if not host.isascii() else host
            host = host.lower()
            if re.search(r"[^a-z0-9._:\[\]-]", host):
                raise ValueError(host)
            address = ip_literal(host)
        except NotAnAddress as exc:
            return self._final(Verdict(Decision.DENY, f"the host is not a valid address ({exc})",
                                       "browser.url"))
        except (ValueError, UnicodeError):
            return self._final(Verdict(Decision.DENY, "the URL does not parse", "browser.url"))
        host = address or host.rstrip(".")
        if parts.scheme not in ("http", "https"):
            return self._final(Verdict(
                Decision.DENY, f"only http(s) pages and about:blank may be opened, not "
                f"{parts.scheme or 'a relative URL'}", "browser.scheme"))
        if not host:
            return self._final(Verdict(Decision.DENY, "the URL has no host", "browser.url"))
        try:
            port = parts.port or default_port(parts.scheme)
        except ValueError:
            return self._final(Verdict(Decision.DENY, "the URL's port is not a number",
                                       "browser.url"))
        block = [host_entry(e) for e in browser.block_domains]
        entry = match_host(block, host, port, wildcards_reach_addresses=True)
        if entry is not None:
            n = block.index(entry)
            return self._final(self._setting(
                Decision.DENY, ("browser", "block_domains", n),
                f"{host} is blocked (matches {str(entry)!r})", "browser.block_domains"))
        allow = [host_entry(e) for e in browser.allow_domains]
        entry = match_host(allow, host, port)
        if entry is not None:
            n = allow.index(entry)
            return self._final(self._setting(
                Decision.ALLOW, ("browser", "allow_domains", n),
                f"{host} is allowed (matches {str(entry)!r})", "browser.allow_domains"))
        decision = browser.default
        why = f"{host} is not in allow_domains"
        if address is not None or is_loopback_name(host):
            # A default allow must not let through an address (this machine, its network, a
            # metadata service) or a loopback name that allow_domains does not name exactly.
            decision = Decision.DENY if decision is Decision.ALLOW else decision
            why = f"{host} is an IP address or a loopback name that allow_domains does not list"
        return self._final(Verdict(decision, why, "browser.default",
                                   self.where(("browser", "default"))))

    # --- MCP and functions -----------------------------------------------------------------

    def mcp(self, server_label: str, tool: str) -> Verdict:
        mcp = self.view.mcp
        server = mcp.servers.get(server_label)
        if server is not None and tool in server.tools:
            return self._final(self._setting(
                server.tools[tool], ("mcp", "servers", server_label, "tools", tool),
                f"MCP tool {tool} on {server_label} is set to {server.tools[tool].value}",
                f"mcp.{server_label}.{tool}"))
        if server is not None and server.default is not None:
            return self._final(self._setting(
                server.default, ("mcp", "servers", server_label, "default"),
                f"MCP server {server_label} is set to {server.default.value}",
                f"mcp.{server_label}"))
        return self._final(Verdict(mcp.default, f"MCP server {server_label} is not listed", "mcp.default",
                                   self.where(("mcp", "default"))))

    def function(self, name: str) -> Verdict:
        functions = self.view.functions
        if name in functions.tools:
            return self._final(self._setting(
                functions.tools[name], ("functions", "tools", name),
                f"function {name} is set to {functions.tools[name].value}", f"functions.{name}"))
        return self._final(Verdict(functions.default, f"function {name} is not listed", "functions.default",
                                   self.where(("functions", "default"))))

    # --- helpers ---------------------------------------------------------------------------

    def where(self, path: KeyPath) -> str:
        """"file:line" of a deciding key, for verdicts."""
        return self.view.where(path)

    def _setting(
        self, decision: Decision, path: tuple[str | int, ...], why: str, rule_id: str | None = None
    ) -> Verdict:
        rule = rule_id or ".".join(str(p) for p in path)
        return Verdict(decision, why, rule, self.where(path))

    def _final(self, verdict: Verdict) -> Verdict:
        if self.view.unattended and verdict.decision is Decision.PROMPT:
            return Verdict(Decision.DENY,
                           f"{verdict.justification} (needs approval, and this policy is "
                           "unattended)", verdict.rule_id, verdict.source)
        return verdict


def view_of(loaded: LoadedPolicy) -> PolicyView:
    """The deciding keys of a loaded policy, and where each is written."""
    view = PolicyView.from_data(loaded.policy.model_dump(mode="json", include=DECIDING),
                                [layer.name for layer in loaded.layers], {})
    sources = {}
    for path in decided_paths(view):
        found = loaded.locate(path)
        if found is not None:
            sources[path] = (loaded.layers.index(found[0]), found[1])
    return view._replace(sources=sources)


class PolicyEngine(Decider):
    """A :class:`Decider` for a loaded policy file, which keeps the file's layers and its whole
    settings (``policy``) for the run, the lints and the error messages."""

    def __init__(self, loaded: LoadedPolicy) -> None:
        self.loaded = loaded
        self.policy: Policy = loaded.policy
        self.sha256: str = loaded.sha256
        self.path: Path = loaded.layers[-1].path
        super().__init__(view_of(loaded))

    def where(self, path: KeyPath) -> str:
        # Read from the layers themselves: a view read back from a snapshot answers from its
        # recorded sources, and tests hold the two to the same answers.
        return self.loaded.where(path)


def example_problems(engine: PolicyEngine) -> list[Problem]:
    """Every inline ``match`` / ``not_match`` example that its rule gets wrong."""
    problems = []
    for rule in engine.rules:
        for field_name, expect in (("match", True), ("not_match", False)):
            for example in getattr(rule.rule, field_name):
                cmds = shell_parse.parse(example)
                got = (any(rule.matches(c) for c in cmds) if expect
                       else any(rule.may_match(c) for c in cmds))
                if got != expect:
                    verb = "does not match" if expect else "matches"
                    problems.append(engine.loaded.problem(
                        ("shell", "rules", rule.index, field_name),
                        f"rule {rule.rule.id!r}: {field_name} example {example!r} {verb} its "
                        f"pattern {_short(rule.rule.pattern)}"))
    return problems


def _short(pattern: object, limit: int = 100) -> str:
    text = str(pattern)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def load_policy(spec: str | Path | None, *, check_examples: bool = True) -> PolicyEngine:
    """A policy file, a preset name (``"strict"``), or None for the default preset.

    Raises :class:`~policies.model.PolicyLoadError` naming the file and line of every problem,
    including inline examples that fail (unless ``check_examples`` is False, for ``policy test``).
    """
    from policies.model import load, preset_path

    if spec is None:
        path = preset_path("default")
    elif names_preset(spec):
        path = preset_path(str(spec))
    else:
        path = Path(spec)
    engine = PolicyEngine(load(path))
    if check_examples:
        problems = example_problems(engine)
        if problems:
            raise PolicyLoadError(problems)
    return engine


def deny_text(verdict: Verdict) -> str:
    """The plain refusal the model sees (through the one error describer)."""
    who = f"rule {verdict.rule_id}" if verdict.rule_id else "the policy's default"
    return describe(PolicyDenied(f"{verdict.justification} ({who})"))
