"""Lints for auditors: policy mistakes that load fine but do not do what they seem to.

Each finding is located at the line to change. One that a shipped preset the checked file extends
has by itself is a note (see :data:`NOTE`): ``policy check`` shows it and does not fail for it.

* ``shadowed-rule`` — an earlier rule matches everything a later one does, so the later one
  never decides (checked pairwise; a rule hidden only by several earlier rules together is not
  reported);
* ``escapable-allow`` — an allow rule on an interpreter or launcher (bash, sh, python, env,
  xargs, npx, sudo…) or on ``find -exec``: once it may run, it may run anything, so the allow
  list can be escaped. (``bash -c 'literal'``, ``env cmd``, ``xargs cmd`` and ``find -exec cmd``
  are already decided by the command they run; the lint is about allowing the launcher itself.)
* ``command-option-allow`` — an allow rule (or an allowing default) lets an ordinary program
  run a command through one of its options or its script language: each program in
  :data:`COMMAND_OPTION_PROBES` is tried with such an option (``sort --compress-program=X``,
  ``git -c alias.x=!X``, ``find -fprint``, ``sed 'e …'``, ``vim -c '!…'``…), and a probe that
  comes out ``allow`` names the rule that let it. The parser already decides most of these by the
  command the option runs (see :mod:`policies.shell_parse`), so a probe is caught either there or
  by a prompt/deny rule placed before the allow rule; the lint checks that one of the two holds;
* ``writable-git`` — a patch may change ``.git`` (hooks and config there run code);
* ``open-network`` — the shell network allow-list contains ``*``;
* ``browser-network-separate`` — commands have no network, but the browser, governed by its own
  ``[browser]`` rules, may open any site through an ``allow_domains = ["*"]`` this file did not
  write (it came from a file it extends): say so in this file if that is what is meant;
* ``address-without-port`` — a browser entry names a loopback or private address without a
  port: the browser's requests are made from this machine, so that opens every service the
  machine (or its network) runs there; name the port (``127.0.0.1:8080``);
* ``timeout-above-max`` — the default shell timeout is above the maximum;
* ``secret-host-not-allowed`` — a ``[secrets]`` entry names a host:port that neither
  ``[shell] network`` nor ``[environment] setup_network`` nor a registry of ``setup_registries``
  (pip's or npm's, as this host's client is configured) lets anyone reach: the proxy would refuse
  every request the secret is for.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from policies.engine import CompiledRule, Element, PolicyEngine, Words
from policies.paths import PRESETS_DIR
from sandloop.errors import ConfigError
from sandloop.matching import host_entry, ip_literal, is_loopback_name, match_host
from sandloop.verdict import Decision

# Only a type here: `policy explain` imports this module and decides from a snapshot, without the
# schema's models (pydantic).
if TYPE_CHECKING:
    from policies.model import Policy

__all__ = ["COMMAND_OPTION_PROBES", "ERROR", "LAUNCHERS", "NOTE", "Finding", "lint", "secrets_not_allowed"]

LAUNCHERS = frozenset({
    # shells and interpreters: their argument is a program
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh",
    "python", "python2", "python3", "python3.10", "python3.11", "python3.12", "python3.13",
    "pypy", "pypy3", "node", "nodejs", "deno", "bun", "perl", "ruby", "php", "lua", "luajit",
    "tclsh", "wish", "Rscript", "busybox", "osascript",
    # editors with a command language that runs programs (vim -c '!sh', ed's !, emacs --eval)
    "vim", "vi", "nvim", "ex", "view", "vimdiff", "ed", "emacs",
    # launchers: their argument is a command
    "env", "xargs", "npx", "pnpx", "bunx", "uvx", "pipx", "sudo", "doas", "su", "exec",
    "command", "builtin", "eval", "source", ".", "nohup", "timeout", "nice", "time", "stdbuf",
    "watch", "parallel", "script", "ssh", "chroot", "nsenter", "unshare", "setsid", "strace",
    "ltrace", "gdb", "flock", "systemd-run", "runuser", "expect",
})
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})

# Program → command lines that make it run a command (or write files it names) through its
# options. "$X" stands for a command chosen at run time: no policy should let such a line run.
# (Options that only a rule can catch are probed with literal words: a run-time word could fill
# any rule's pattern, which would hide a missing rule.)
COMMAND_OPTION_PROBES: dict[str, tuple[str, ...]] = {
    "sort": ('sort --compress-program="$X" f', "sort --compress-prog=sh f"),
    "tar": ('tar --to-command="$X" -xf a.tar', 'tar -I "$X" -xf a.tar',
            'tar -cf a.tar --checkpoint=1 --checkpoint-action=exec="$X" f', 'tar -F "$X" -cf a f'),
    "git": ("git -c alias.x='!sh' x", "git -c core.pager=sh log", 'git rebase --exec "$X"',
            'git grep -O"$X" x', 'git fetch --upload-pack="$X" o', 'git clone -u "$X" a b',
            'git ls-remote --upload-pack="$X" o', 'git bisect run "$X"',
            'git submodule foreach "$X"', 'git difftool -x "$X"', "git --exec-path=. status"),
    "zip": ('zip -TT "$X" -T a.zip f', 'zip --unzip-command="$X" -T a.zip f'),
    "rsync": ('rsync -e "$X" a b:c', 'rsync --rsh="$X" a b:c'),
    "man": ('man -P "$X" ls', 'man --html="$X" ls'),
    "less": ("LESSOPEN='|sh %s' less f", "less '+!sh' f", "less -k keys f"),
    "find": ("find . -fprint /tmp/x", "find . -fprintf /tmp/x %p", "find . -fls /tmp/x",
             "find . -fprint0 /tmp/x", "find . -delete", 'find . -exec "$X" {} +'),
    "sed": ("sed 'e sh' f", "sed 's/x/sh/e' f", "sed -n 'w /tmp/x' f", "sed -f x.sed f"),
    "awk": ("awk 'BEGIN{system(\"sh\")}'", "awk 'BEGIN{print | \"sh\"}'", "awk -f x.awk"),
    "rg": ('rg --pre "$X" x', 'rg --hostname-bin="$X" x'),
    "ag": ('ag --pager "$X" x',),
    "fd": ('fd -x "$X"', 'fd --exec-batch "$X"'),
    "env": ("env -S 'sh -c id'",),
    "xargs": ('xargs "$X"',),
    "printf": ("printf -v PATH /tmp",),
    "read": ("read PATH",),
}
_GIT_PROBES = ((".git/config", "update_file"), (".git/hooks/pre-commit", "create_file"))


#: A finding's severity: an error fails ``policy check``; a note is shown and does not. A
#: finding that a shipped preset the checked file extends has on its own, unchanged, is a note:
#: the preset is sandloop's, documented and checked by itself, so a user's policy is not failed
#: for it. Everything the user's file changes is judged as an error, even where it surfaces at a
#: preset's line.
ERROR, NOTE = "error", "note"


@dataclass(frozen=True)
class Finding:
    code: str
    message: str
    rule_id: str | None
    source: str  # "file:line"
    severity: str = ERROR

    def as_dict(self) -> dict[str, str | None]:
        return asdict(self)


def _covers(a: Element, b: Element) -> bool:
    """Does element a accept every word element b accepts?"""
    if a == "*":
        return b != "**"
    if isinstance(a, Words) and isinstance(b, Words):
        # b's globs are only known to be covered by the same glob in a
        return all(w in a for w in b.literal) and set(b.globs) <= set(a.globs)
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


def _runs_named_module(rule: CompiledRule) -> bool:
    """``python3 -m pytest``: the interpreter runs one named module (the test runner), not a
    program from its arguments."""
    elements = rule.elements
    return (len(elements) >= 3 and isinstance(elements[1], Words) and elements[1].literal == {"-m"}
            and not elements[1].globs and isinstance(elements[2], Words) and not elements[2].globs)


def _escapable(rule: CompiledRule) -> str | None:
    first = rule.elements[0]
    if not isinstance(first, Words):
        return "matches any program, interpreters and launchers included"
    launchers = sorted(name for name in LAUNCHERS if name in first)
    if launchers and not _runs_named_module(rule):
        return f"allows {', '.join(launchers)}, which can run any program"
    if "find" in first and any(
        isinstance(e, Words) and any(x in e for x in _FIND_EXEC) for e in rule.elements[1:]
    ):
        return "allows find -exec with any command"
    return None


def _command_options(engine: PolicyEngine) -> list[Finding]:
    findings: list[Finding] = []
    seen: set[tuple[str | None, str]] = set()
    for program, probes in COMMAND_OPTION_PROBES.items():
        for probe in probes:
            verdict = engine.shell(probe)
            if verdict.decision is not Decision.ALLOW or (verdict.rule_id, program) in seen:
                continue
            seen.add((verdict.rule_id, program))
            who = (f"allow rule {verdict.rule_id!r}" if verdict.rule_id != "shell.default"
                   else "the shell default (allow)")
            findings.append(Finding(
                "command-option-allow",
                f"{who} lets `{probe}` run: {program} runs a command or writes a file through "
                "that option; put a prompt or deny rule for it before the allow rule",
                verdict.rule_id, verdict.source or engine.loaded.where(("shell", "default"))))
    return findings


def _browser(engine: PolicyEngine) -> list[Finding]:
    findings: list[Finding] = []
    policy, own = engine.policy, engine.loaded.layers[-1].data
    if policy.shell.network == "none" and "*" in policy.browser.allow_domains \
            and "allow_domains" not in own.get("browser", {}):
        findings.append(Finding(
            "browser-network-separate",
            "commands have no network (shell.network = \"none\"), but the browser may open any site: "
            "it is governed by [browser] on its own, and allow_domains = [\"*\"] comes from a file "
            "this one extends; set [browser] allow_domains here to say what the browser may reach",
            "browser.allow_domains", engine.loaded.where(("browser", "allow_domains"))))
    for n, text in enumerate(policy.browser.allow_domains):
        entry = host_entry(text)
        address = ip_literal(entry.host) if not entry.wildcard else None
        if entry.port is None and (address is not None or is_loopback_name(entry.host)) and \
                (address is None or not ipaddress.ip_address(address).is_global):
            findings.append(Finding(
                "address-without-port",
                f"browser.allow_domains entry {text!r} opens every port of a non-public address; the "
                "browser's requests come from this machine, so that is every service it can reach "
                f"there: name the port ({entry.host}:PORT)",
                "browser.allow_domains", engine.loaded.where(("browser", "allow_domains", n))))
    return findings


def secrets_not_allowed(policy: Policy) -> list[tuple[str, str]]:
    """The ``[secrets]`` entries whose host:port no network list of the policy allows, each with
    what allows nothing for it. A registry of ``setup_registries`` allows its own hosts, as this
    host's client is configured (pip's and npm's, asked only when a secret needs them), for setup
    only; the image's package sources (apt, apk, dnf) are known only once the image is looked at,
    so a secret for one of their hosts is named in ``setup_network``."""
    shell = policy.shell.network if isinstance(policy.shell.network, list) else []
    lists = [host_entry(entry) for entry in [*shell, *policy.environment.setup_network]]
    left = [name for name, secret in policy.secrets.items() if match_host(lists, secret.host, secret.port) is None]
    # Imported here: it starts the clients (subprocess), and `policy explain` imports this module.
    from sandloop.package_clients import CLIENTS, index_hosts

    clients = [name for name in policy.environment.setup_registries if name in CLIENTS]
    if not left or not clients:
        return [(name, _NOT_LISTED) for name in left]
    try:
        hosts = index_hosts(clients)
    except ConfigError as exc:
        return [(name, f"{_NOT_LISTED}, and the registries of setup_registries are unknown ({exc})")
                for name in left]
    # A registry named without a port is served on HTTPS's (a secret is added to HTTPS only):
    # a bare host entry would match every port of that host.
    registries = [host_entry(host if ":" in host.rpartition("]")[2] else f"{host}:443") for host in hosts]
    return [(name, f"{_NOT_LISTED}, nor is it a registry host of setup_registries "
             f"({', '.join(clients)}: {', '.join(hosts) or 'none'})")
            for name in left if match_host(registries, policy.secrets[name].host, policy.secrets[name].port) is None]


_NOT_LISTED = "neither [shell] network nor [environment] setup_network allows it"


def _secrets(engine: PolicyEngine) -> list[Finding]:
    findings = []
    for name, why in secrets_not_allowed(engine.policy):
        secret = engine.policy.secrets[name]
        findings.append(Finding(
            "secret-host-not-allowed",
            f"secret {name!r} is for {secret.host}:{secret.port}: {why}; add the host there, or drop the secret",
            f"secrets.{name}", engine.loaded.where(("secrets", name))))
    return findings


def lint(engine: PolicyEngine) -> list[Finding]:
    """The findings of a policy. One that a shipped preset it extends has by itself (the same
    finding, at the same line) is a note: the user's file did not cause it and cannot change that
    line. Anything else is an error, wherever it is located — a user's line can surface a finding
    at a preset's line (a narrowed rule of the same id, a lower maximum), and a file of the user's
    own may bear a preset's name, so nothing is judged by a location's name alone."""
    inherited = _inherited(engine)
    return [replace(f, severity=NOTE) if _key(f) in inherited else f for f in _findings(engine)]


_Key = tuple[str, str | None, str, str]


def _key(finding: Finding) -> _Key:
    return finding.code, finding.rule_id, finding.source, finding.message


def _inherited(engine: PolicyEngine) -> frozenset[_Key]:
    """The findings the shipped presets among the file's bases have each on their own."""
    layers = engine.loaded.layers
    return frozenset().union(*(_preset_alone(layers[i].path.resolve()) for i in _shipped_layers(engine)))


@functools.lru_cache(maxsize=16)
def _preset_alone(path: Path) -> frozenset[_Key]:
    """The findings of a file that extends the preset at ``path`` and says nothing else: what
    any policy extending it has whatever it does (some lints are about what a file inherits)."""
    # Imported here: `policy explain` imports this module without the schema's models (pydantic).
    from policies.model import load

    with tempfile.TemporaryDirectory(prefix="sandloop-lint-") as folder:
        bare = Path(folder) / "extends-only.toml"
        bare.write_text(f"version = 1\nextends = [{json.dumps(str(path))}]\n")
        return frozenset(_key(f) for f in _findings(PolicyEngine(load(bare))))


def _shipped_layers(engine: PolicyEngine) -> frozenset[int]:
    """The indexes of the file's bases that are shipped presets (by their resolved path)."""
    presets = PRESETS_DIR.resolve()
    return frozenset(i for i, layer in enumerate(engine.loaded.layers[:-1]) if layer.path.resolve().parent == presets)


def _findings(engine: PolicyEngine) -> list[Finding]:
    findings: list[Finding] = []
    rules = engine.rules
    shipped = _shipped_layers(engine)
    for later in rules:
        for earlier in rules[: later.index]:
            if _subsumes(earlier.elements, later.elements):
                findings.append(_shadowed(engine, shipped, earlier, later))
                break
    for rule in rules:
        if rule.rule.decision is Decision.ALLOW:
            why = _escapable(rule)
            if why:
                findings.append(Finding(
                    "escapable-allow", f"allow rule {rule.rule.id!r} {why}: the allow-list can "
                    "be escaped; prompt for it, or allow a literal `bash -c '…'` instead",
                    rule.rule.id, rule.source))
    findings.extend(_command_options(engine))
    for path, kind in _GIT_PROBES:
        verdict = engine.patch(path, kind)
        if verdict.decision is not Decision.DENY:
            findings.append(Finding(
                "writable-git", f"a patch may {kind.split('_')[0]} {path} ({verdict.decision.value}"
                "); hooks and config in .git run code — add '**/.git/**' to files.read_only",
                # where the fix goes (the read_only list), not the writable glob that lets it
                verdict.rule_id, engine.loaded.where(("files", "read_only"))))
            break
    shell = engine.policy.shell
    if isinstance(shell.network, list) and "*" in shell.network:
        findings.append(Finding(
            "open-network", "shell.network allows every domain; list the domains commands need",
            "shell.network", engine.loaded.where(("shell", "network"))))
    findings.extend(_browser(engine))
    findings.extend(_secrets(engine))
    if shell.default_timeout_ms > shell.max_timeout_ms:
        findings.append(Finding(
            "timeout-above-max", f"shell.default_timeout_ms ({shell.default_timeout_ms}) is above "
            f"shell.max_timeout_ms ({shell.max_timeout_ms})",
            "shell.default_timeout_ms", engine.loaded.where(("shell", "default_timeout_ms"))))
    return findings


def _shadowed(engine: PolicyEngine, shipped: frozenset[int], earlier: CompiledRule,
              later: CompiledRule) -> Finding:
    """A rule that never decides. When the user's rule hides a shipped preset's rule that would
    decide otherwise, the finding is about the user's rule: the preset's line is not the one to
    change, and the hidden decision (a prompt on git push…) is what the user may not have meant."""
    layer = engine.loaded.rule_origins
    if layer[later.index][0] in shipped and layer[earlier.index][0] not in shipped:
        if earlier.rule.decision is later.rule.decision:  # the same decision either way: harmless
            return Finding(
                "shadowed-rule", f"rule {later.rule.id!r} never decides: your rule {earlier.rule.id!r} "
                f"({earlier.source}) matches everything it matches, with the same decision",
                later.rule.id, later.source, NOTE)
        return Finding(
            "shadowed-rule",
            f"rule {earlier.rule.id!r} matches everything the preset's rule {later.rule.id!r} ({later.source}, "
            f"{later.rule.decision.value}) matches, so that rule never decides: name yours {later.rule.id!r} "
            "to replace it, or narrow it", earlier.rule.id, earlier.source)
    return Finding(
        "shadowed-rule",
        f"rule {later.rule.id!r} never decides: the earlier rule {earlier.rule.id!r} "
        f"({earlier.source}) matches everything it matches",
        later.rule.id, later.source)
