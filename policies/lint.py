"""Lints for auditors: policy mistakes that load fine but do not do what they seem to.

* ``shadowed-rule`` — an earlier rule matches everything a later one does, so the later one
  never decides (checked pairwise; a rule hidden only by several earlier rules together is not
  reported);
* ``escapable-allow`` — an allow rule on an interpreter or launcher (bash, sh, python, env,
  xargs, npx, sudo…) or on ``find -exec``: once it may run, it may run anything, so the allow
  list can be escaped. (``bash -c 'literal'``, ``env cmd``, ``xargs cmd`` and ``find -exec cmd``
  are already decided by the command they run; the lint is about allowing the launcher itself.)
* ``writable-git`` — a patch may change ``.git`` (hooks and config there run code);
* ``open-network`` — the shell network allow-list contains ``*``;
* ``timeout-above-max`` — the default shell timeout is above the maximum.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from policies.decision import Decision
from policies.engine import CompiledRule, Element, PolicyEngine

__all__ = ["LAUNCHERS", "Finding", "lint"]

LAUNCHERS = frozenset({
    # shells and interpreters: their argument is a program
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh",
    "python", "python2", "python3", "python3.10", "python3.11", "python3.12", "python3.13",
    "pypy", "pypy3", "node", "nodejs", "deno", "bun", "perl", "ruby", "php", "lua", "luajit",
    "tclsh", "wish", "Rscript", "awk", "gawk", "mawk", "nawk", "busybox", "osascript",
    # launchers: their argument is a command
    "env", "xargs", "npx", "pnpx", "bunx", "uvx", "pipx", "sudo", "doas", "su", "exec",
    "command", "builtin", "eval", "source", ".", "nohup", "timeout", "nice", "time", "stdbuf",
    "watch", "parallel", "script", "ssh", "chroot", "nsenter", "unshare", "setsid", "strace",
    "ltrace", "gdb", "flock", "systemd-run", "runuser", "expect",
})
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_GIT_PROBES = ((".git/config", "update_file"), (".git/hooks/pre-commit", "create_file"))


@dataclass(frozen=True)
class Finding:
    code: str
    message: str
    rule_id: str | None
    source: str  # "file:line"

    def as_dict(self) -> dict[str, str | None]:
        return asdict(self)


def _covers(a: Element, b: Element) -> bool:
    """Does element a accept every word element b accepts?"""
    if a == "*":
        return b != "**"
    if isinstance(a, frozenset) and isinstance(b, frozenset):
        return b <= a
    return False


def _subsumes(a: tuple[Element, ...], b: tuple[Element, ...], i: int = 0, j: int = 0) -> bool:
    """Does every argv matched by prefix pattern b also match a? Sound, not complete."""
    if i == len(a):
        return True
    if a[i] == "**":
        return any(_subsumes(a, b, i + 1, k) for k in range(j, len(b) + 1))
    if j == len(b) or b[j] == "**":
        return False
    return _covers(a[i], b[j]) and _subsumes(a, b, i + 1, j + 1)


def _first_words(rule: CompiledRule) -> frozenset[str] | None:
    """The program names a rule can match, or None when it matches any program."""
    first = rule.elements[0]
    return first if isinstance(first, frozenset) else None


def _escapable(rule: CompiledRule) -> str | None:
    names = _first_words(rule)
    if names is None:
        return "matches any program, interpreters and launchers included"
    launchers = sorted(names & LAUNCHERS)
    if launchers:
        return f"allows {', '.join(launchers)}, which can run any program"
    if "find" in names and any(
        isinstance(e, frozenset) and e & _FIND_EXEC for e in rule.elements[1:]
    ):
        return "allows find -exec with any command"
    return None


def lint(engine: PolicyEngine) -> list[Finding]:
    findings: list[Finding] = []
    rules = engine.rules
    for later in rules:
        for earlier in rules[: later.index]:
            if _subsumes(earlier.elements, later.elements):
                findings.append(Finding(
                    "shadowed-rule",
                    f"rule {later.rule.id!r} never decides: the earlier rule {earlier.rule.id!r} "
                    f"({earlier.source}) matches everything it matches",
                    later.rule.id, later.source))
                break
    for rule in rules:
        if rule.rule.decision is Decision.ALLOW:
            why = _escapable(rule)
            if why:
                findings.append(Finding(
                    "escapable-allow", f"allow rule {rule.rule.id!r} {why}: the allow-list can "
                    "be escaped; prompt for it, or allow a literal `bash -c '…'` instead",
                    rule.rule.id, rule.source))
    for path, kind in _GIT_PROBES:
        verdict = engine.patch(path, kind)
        if verdict.decision is not Decision.DENY:
            findings.append(Finding(
                "writable-git", f"a patch may {kind.split('_')[0]} {path} ({verdict.decision.value}"
                "); hooks and config in .git run code — add '**/.git/**' to files.read_only",
                verdict.rule_id, verdict.source or engine.loaded.where(("files",))))
            break
    shell = engine.policy.shell
    if isinstance(shell.network, list) and "*" in shell.network:
        findings.append(Finding(
            "open-network", "shell.network allows every domain; list the domains commands need",
            "shell.network", engine.loaded.where(("shell", "network"))))
    if shell.default_timeout_ms > shell.max_timeout_ms:
        findings.append(Finding(
            "timeout-above-max", f"shell.default_timeout_ms ({shell.default_timeout_ms}) is above "
            f"shell.max_timeout_ms ({shell.max_timeout_ms})",
            "shell.default_timeout_ms", engine.loaded.where(("shell", "default_timeout_ms"))))
    return findings
