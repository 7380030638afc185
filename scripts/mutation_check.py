#!/usr/bin/env python3
"""A small mutation check: does the test suite notice when a security property is broken?

Each mutant is a named, deliberate defect — one or more exact (file, original snippet,
replacement) edits — and the pytest selection that ought to notice it. The script copies the
tree (tracked and untracked-but-not-ignored files, as they are in the working tree) to a
scratch directory, runs every selection once unmutated (a red baseline would make "caught"
meaningless), then applies the mutants one at a time, runs their selection, and reports:

  caught   the selection failed, and its first failing test passes on the unmutated tree
           (the test is named)
  flaky?   the selection failed, but so does that test without the mutant: no verdict
  MISSED   the selection passed with the defect in place: a hole in the suite
  stale    a snippet is no longer in its file (the code moved or changed): update the mutant
  hung     the selection did not finish within --timeout (noticed, but not by a failure)
  error    pytest could not run the selection (exit code shown)

A snippet must occur exactly ``count`` times in the first candidate file that holds it, or the
mutant is stale: a mutant that silently applies nowhere would pass as "MISSED" or, worse, as a
clean run. Candidate files let a mutant follow a file being moved (``sandbox/runner.py`` is
becoming ``sandbox/helper/main.py``); alternative forms let it follow a known refactor.

Not run in CI (it takes tens of minutes). Run it from the repository root with the project's
venv:  .venv/bin/python scripts/mutation_check.py [--list] [--only NAME ...] [--keep]
Exit code 0 when every mutant is caught, 1 otherwise.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ("sandbox/runner.py", "sandbox/helper/main.py")  # the helper, before and after its move


@dataclass(frozen=True)
class Edit:
    files: tuple[str, ...]  # candidate paths, first match wins (a file being moved)
    #: (original, replacement) forms, today's first; later ones follow a known refactor
    forms: tuple[tuple[str, str], ...]
    count: int = 1  # how many times ``original`` must occur; all of them are replaced


@dataclass(frozen=True)
class Mutant:
    name: str
    breaks: str  # the property the defect breaks
    edits: tuple[Edit, ...]
    tests: tuple[str, ...]  # the pytest selection that should notice


def edit(files: str | tuple[str, ...], original: str, replacement: str, count: int = 1, *,
         or_: Sequence[tuple[str, str]] = ()) -> Edit:
    """One edit: ``original`` → ``replacement`` in the first of ``files`` that holds it exactly
    ``count`` times, or else the first of the ``or_`` forms that applies."""
    return Edit((files,) if isinstance(files, str) else files, ((original, replacement), *or_), count)


SANDBOX_TESTS = ("tests/sandbox", "tests/handlers", "tests/executor/test_loop_sandbox.py")
HELPER_TESTS = ("tests/sandbox", "tests/handlers", "tests/patch/test_hostile_docker.py")
SECCOMP_TESTS = ("tests/sandbox/test_seccomp.py", "tests/security/test_seccomp_filter.py")

MUTANTS: tuple[Mutant, ...] = (
    # --- the four the audit named ------------------------------------------------------------
    Mutant("docker-host-env-forwarded", "nothing from the host environment (never the API key) "
           "reaches the container",
           (edit("sandbox/docker.py", "environment={},", 'environment=dict(__import__("os").environ),'),),
           SANDBOX_TESTS),
    Mutant("helper-no-sigkill-after-sigterm", "a timed-out command that ignores SIGTERM is killed",
           (edit(RUNNER, "_killpg(proc.pid, signal.SIGKILL)\n                    killed = True",
                 "killed = True"),),
           HELPER_TESTS),
    Mutant("patch-move-to-unvalidated", "a '*** Move to:' destination is validated like any path",
           (edit("sandbox/patch/apply.py", "move_to = paths.validate(move_to, read_only_globs)",
                 "move_to = move_to"),),
           ("tests/patch",)),
    Mutant("request-log-key-unmasked", "the configured OPENAI_API_KEY value never reaches the "
           "request log",
           (edit("executor/audit.py", 'self._literal = os.environ.get("OPENAI_API_KEY") or None',
                 "self._literal = None"),),
           ("tests/executor",)),
    # --- the policy engine -------------------------------------------------------------------
    Mutant("policy-unknown-commands-allowed", "a command not knowable before it runs never gets "
           "a default allow",
           (edit("policies/engine.py",
                 "decision = shell.default if shell.default is not Decision.ALLOW else Decision.PROMPT",
                 "decision = shell.default"),),
           ("tests/policies",)),
    Mutant("policy-shell-c-string-not-parsed", "the commands inside a literal `bash -c '…'` are "
           "decided, not just `bash`",
           (edit("policies/shell_parse.py", "return _parse(script, depth + 1)", "return [cmd]",
                 or_=[("return _parse(script, depth + 1, cwds)", "return [cmd]")]),),
           ("tests/policies",)),
    Mutant("policy-least-strict-command-wins", "a command line gets its strictest command's verdict",
           (edit("policies/engine.py", "worst = max(decided, key=lambda pair: pair[1].decision.strictness)[1]",
                 "worst = min(decided, key=lambda pair: pair[1].decision.strictness)[1]",
                 or_=[("return strictest([verdict for _, verdict in decided])",
                       "return min((v for _, v in decided), key=lambda v: v.decision.strictness)")]),),
           ("tests/policies",)),
    Mutant("policy-read-only-globs-ignored", "patches to read-only paths (.git) are denied",
           (edit("policies/engine.py", "for n, glob in enumerate(files.read_only):",
                 "for n, glob in enumerate(()):"),),
           ("tests/policies", "tests/patch")),
    Mutant("policy-read-only-case-sensitive", "read-only globs hold on a case-insensitive disk (.GIT)",
           (edit("policies/engine.py", "if glob_match(glob, normal, fold_case=True):",
                 "if glob_match(glob, normal, fold_case=False):"),),
           ("tests/policies", "tests/patch")),
    Mutant("policy-unattended-still-prompts", "an unattended policy turns every prompt into deny",
           (edit("policies/engine.py",
                 "if self.policy.unattended and verdict.decision is Decision.PROMPT:", "if False:"),),
           ("tests/policies", "tests/executor")),
    Mutant("browser-default-allow-opens-addresses", "a default-allow browser policy still refuses "
           "IP addresses and loopback names it does not list",
           (edit("policies/engine.py",
                 "decision = Decision.DENY if decision is Decision.ALLOW else decision",
                 "decision = decision"),),
           ("tests/policies", "tests/browser/test_domain_rules.py")),
    # --- host matching and the egress proxy --------------------------------------------------
    Mutant("egress-wildcard-reaches-addresses", "an egress wildcard never opens a raw IP address",
           (edit("sandbox/egress_proxy.py", "entry = match_host(allow, host, port)",
                 "entry = match_host(allow, host, port, wildcards_reach_addresses=True)"),),
           ("tests/egress",)),
    Mutant("egress-name-to-private-address", "an allowed name that resolves to a private address "
           "(the host, the bridge) is not followed",
           (edit("sandbox/egress_proxy.py", "if not ip.is_global and not private_ok:", "if False:"),),
           ("tests/egress",)),
    Mutant("wildcard-matches-without-the-dot", "*.example.com does not match evil-example.com",
           (edit("sandloop/matching.py", "return not exact_only and host.endswith(self.host[1:])",
                 "return not exact_only and host.endswith(self.host[2:])"),),
           ("tests/egress", "tests/policies", "tests/browser/test_domain_rules.py")),
    # --- secrets at the boundary ----------------------------------------------------------------
    Mutant("secret-skips-upstream-verification", "a secret is sent only to a server the host's trust "
           "store verifies",
           (edit("sandbox/egress_inject.py", "ssl.create_default_context(cadata=",
                 "ssl._create_unverified_context(cadata="),),
           ("tests/egress/test_inject.py", "tests/egress/test_secrets_docker.py")),
    Mutant("secret-any-host-header", "inside a secret's tunnel, a request naming another Host is refused",
           (edit("sandbox/egress_inject.py", "if len(hosts) != 1 or hosts[0] not in names:", "if len(hosts) != 1:"),),
           ("tests/egress/test_inject.py",)),
    Mutant("secret-echo-unmasked", "an echoed secret reaches the sandbox masked",
           (edit("sandbox/egress_inject.py", "data = data.replace(form, b\"*\" * len(form))", "pass"),),
           ("tests/egress/test_inject.py", "tests/egress/test_secrets_docker.py")),
    Mutant("secret-value-in-proxy-environment", "the proxy gets the values on stdin, never in its "
           "environment or command line (which the engine shows)",
           (edit("sandbox/egress.py", "environment={\"PYTHONDONTWRITEBYTECODE\": \"1\"},",
                 "environment={\"PYTHONDONTWRITEBYTECODE\": \"1\", "
                 "\"SECRETS\": json.dumps([s.for_proxy() for s in self.secrets])},"),),
           ("tests/egress/test_secrets_docker.py",)),
    # --- the helper's file operations --------------------------------------------------------
    Mutant("helper-walker-follows-symlinks", "no symlink on a path leads a file operation outside "
           "/workspace (O_NOFOLLOW on every directory)",
           (edit(RUNNER, "nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)",
                 "nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)", count=2),),
           HELPER_TESTS),
    Mutant("helper-read-follows-final-symlink", "reading a file never follows a symlink out",
           (edit(RUNNER, "fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)",
                 "fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)"),),
           HELPER_TESTS),
    Mutant("helper-accepts-dotdot", "a path with '..' is refused inside the container too",
           (edit(RUNNER, 'if ".." in parts:', "if False:"),),
           HELPER_TESTS),
    # --- the container's hardening -----------------------------------------------------------
    Mutant("docker-cap-drop-removed", "every capability is dropped",
           (edit("sandbox/docker.py", 'cap_drop=["ALL"],', "cap_drop=None,"),),
           SANDBOX_TESTS),
    Mutant("docker-network-none-dropped", "network off means only lo",
           (edit("sandbox/docker.py", "network_mode=cfg.network,",
                 'network_mode="bridge" if cfg.network == "none" else cfg.network,'),
            edit("sandbox/docker.py", 'network_disabled=cfg.network == "none",', "network_disabled=False,")),
           SANDBOX_TESTS),
    Mutant("docker-no-new-privileges-dropped", "no process in the container gains privileges",
           (edit("sandbox/docker.py", 'opts = ["no-new-privileges"]', "opts = []"),),
           SANDBOX_TESTS),
    Mutant("docker-pids-limit-dropped", "a fork bomb meets a pids limit",
           (edit("sandbox/docker.py", "pids_limit=self._engine_pids_limit(),", "pids_limit=None,"),),
           SANDBOX_TESTS),
    Mutant("docker-git-mount-writable", "commands cannot write .git (hooks would run on the host)",
           (edit("sandbox/docker.py", 'mounts.append(Mount(inside, str(host), type="bind", read_only=True))',
                 'mounts.append(Mount(inside, str(host), type="bind", read_only=False))'),),
           SANDBOX_TESTS),
    Mutant("docker-engine-profile-dropped", "the engine applies sandloop's rules to every process of a container",
           (edit("sandbox/docker.py", 'return ["no-new-privileges", f"seccomp={seccomp.no_setid_profile(runtime)}"]',
                 'return ["no-new-privileges"]'),),
           SECCOMP_TESTS),
    # --- sandloop's seccomp filter -----------------------------------------------------------
    Mutant("helper-without-its-filter", "the helper installs its seccomp filter before any command",
           (edit(RUNNER, "refusal = confine.confine(required=not args.no_seccomp)", "refusal = None"),),
           SECCOMP_TESTS),
    Mutant("seccomp-setgid-allowed", "no setgid bit either, by any route",
           (edit("sandbox/helper/seccomp_rules.py", "SETID = 0o6000", "SETID = 0o4000"),),
           SECCOMP_TESTS),
    Mutant("seccomp-other-abis-allowed", "an i386, arm or x32 call cannot go around the rules",
           (edit("sandbox/helper/seccomp_rules.py", '_Insn(_JEQ, arch.audit, jf="kill"),', "_Insn(_JEQ, arch.audit),"),
            edit("sandbox/helper/seccomp_rules.py", 'items.append(_Insn(_JGE, _X32_BIT, jt="x32"))', "pass")),
           SECCOMP_TESTS),
    # --- the audit log -----------------------------------------------------------------------
    Mutant("audit-prev-link-unchecked", "an edit whose own sha256 was recomputed still breaks the chain",
           (edit("policies/audit.py", 'if data.get("prev") != prev:', "if False:"),),
           ("tests/policies",)),
)


# --- applying mutants ----------------------------------------------------------------------


class Stale(Exception):
    """A mutant that no longer applies: the text it changes is not where it was."""


def _target(tree: Path, e: Edit) -> tuple[Path, str, str, str]:
    """The file an edit applies to, its text, and the form that applies (original,
    replacement); Stale when no candidate file holds any form exactly ``count`` times."""
    seen: list[str] = []
    for rel in e.files:
        path = tree / rel
        if not path.is_file():
            seen.append(f"{rel}: no such file")
            continue
        text = path.read_text(encoding="utf-8")
        for original, replacement in e.forms:
            found = text.count(original)
            if found == e.count:
                return path, text, original, replacement
            seen.append(f"{rel}: {original.strip().splitlines()[0][:50]!r} found {found}×, expected {e.count}×")
    raise Stale("; ".join(seen))


@contextmanager
def applied(tree: Path, mutant: Mutant) -> Iterator[None]:
    """The tree with ``mutant`` in place; restored afterwards, whatever happens."""
    originals: dict[Path, str] = {}
    try:
        for e in mutant.edits:
            path, text, original, replacement = _target(tree, e)
            originals.setdefault(path, text)
            mutated = text.replace(original, replacement)
            if path.suffix == ".py":
                compile(mutated, str(path), "exec")  # a mutant must break behaviour, not syntax
            path.write_text(mutated, encoding="utf-8")
        yield
    finally:
        for path, text in originals.items():
            path.write_text(text, encoding="utf-8")


# --- the scratch tree and pytest -----------------------------------------------------------


def scratch_copy(dest: Path) -> Path:
    """The working tree as it is (tracked and untracked-but-not-ignored files) under ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout
    tree = dest / "tree"
    for rel in filter(None, listed.decode().split("\0")):
        src = ROOT / rel
        if src.is_symlink():  # as a link (sandbox/Dockerfile.sandbox names the one at the top)
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(src), tree / rel)
        elif src.is_file():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tree / rel)
    return tree


def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SANDLOOP_TESTS_ALLOW_SKIP", "PYTEST_ADDOPTS")}  # no silent skips here
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def check_imports(tree: Path) -> None:
    """The project's packages must load from the scratch tree, not the installed checkout."""
    code = "import executor, policies, sandbox, sandloop; print(*(m.__file__ for m in " \
           "(executor, policies, sandbox, sandloop)), sep='\\n')"
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=_env(tree),
                         capture_output=True, text=True, check=True).stdout.split()
    wrong = [f for f in out if not Path(f).resolve().is_relative_to(tree.resolve())]
    if wrong:
        raise SystemExit(f"the scratch tree does not shadow the installed packages: {wrong}")


@dataclass
class Outcome:
    result: str
    seconds: float
    detail: str = ""


@dataclass
class PytestRun:
    code: int | None  # None: it did not finish in time
    seconds: float
    first_failure: str  # the node id
    why: str  # pytest's one-line reason for it
    last_line: str  # pytest's summary line, or what tests/conftest.py said about leaks


#: A pytest plugin (written beside the scratch tree) that records each failing test's exact node
#: id and one-line reason: the terminal summary cannot be split reliably (ids may hold " - ").
PLUGIN = '''
import json, os

def pytest_collectreport(report):
    pytest_runtest_logreport(report)

def pytest_runtest_logreport(report):
    if report.failed:
        lines = report.longreprtext.splitlines()
        why = next((x[1:].strip() for x in lines if x.startswith("E ")), lines[-1] if lines else "")
        with open(os.environ["MUTANT_FAILURES"], "a") as fh:
            fh.write(json.dumps([report.nodeid, why]) + "\\n")
'''


def run_pytest(tree: Path, selection: Sequence[str], timeout: float, *, stop_first: bool = True) -> PytestRun:
    failures = tree.parent / "failures.jsonl"
    failures.unlink(missing_ok=True)
    (tree.parent / "mutant_plugin.py").write_text(PLUGIN)
    env = _env(tree)
    env["PYTHONPATH"] += os.pathsep + str(tree.parent)
    env["MUTANT_FAILURES"] = str(failures)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "mutant_plugin",
               "--tb=line", *(["-x"] if stop_first else []), *selection]
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return PytestRun(None, time.monotonic() - start, "", "", f"no result after {timeout:.0f} s")
    lines = done.stdout.splitlines()
    last = lines[-1] if lines else done.stderr.strip()[-200:]
    last = next((line for line in lines if line.startswith("LEAK:")), last)  # the session check
    first: list[str] = ["", ""]
    if failures.exists():
        first = json.loads(failures.read_text().splitlines()[0])
    return PytestRun(done.returncode, time.monotonic() - start, first[0], first[1], last)


def judge(tree: Path, mutant: Mutant, timeout: float) -> Outcome:
    """Run the mutant's selection with the mutant in place, and judge the outcome. A failure
    counts once the failing test passes again without the mutant: on a shared machine a flaky
    test must not pass for a caught mutant."""
    with applied(tree, mutant):
        run = run_pytest(tree, mutant.tests, timeout)
    if run.code is None:
        return Outcome("hung", run.seconds, run.last_line)
    if run.code == 0:
        return Outcome("MISSED", run.seconds, run.last_line)
    if run.code == 1:
        detail = f"{run.first_failure} — {run.why[:120]}" if run.why else run.first_failure or run.last_line
        if run.first_failure:
            again = run_pytest(tree, [run.first_failure], timeout)
            if again.code != 0:
                return Outcome("flaky?", run.seconds, f"{run.first_failure} fails unmutated too "
                               f"({again.why[:80] or again.last_line})")
        return Outcome("caught", run.seconds, detail)
    if run.code == 5:
        return Outcome("stale", run.seconds, "the selection collects no tests")
    return Outcome("error", run.seconds, f"pytest exit {run.code}: {run.last_line}")


# --- main ----------------------------------------------------------------------------------


def _selected(names: Sequence[str] | None) -> list[Mutant]:
    if not names:
        return list(MUTANTS)
    chosen = [m for m in MUTANTS if any(fnmatch.fnmatch(m.name, n) for n in names)]
    if not chosen:
        raise SystemExit(f"no mutant matches {', '.join(names)} (see --list)")
    return chosen


def _row(name: str, outcome: Outcome) -> str:
    return f"{name:42s} {outcome.result:7s} {outcome.seconds:6.1f}s  {outcome.detail}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--list", action="store_true", help="list the mutants and whether each still applies")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these mutants (glob patterns)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per pytest run")
    parser.add_argument("--keep", action="store_true", help="keep the scratch tree (its path is printed)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    args = parser.parse_args(argv)
    mutants = _selected(args.only)

    if args.list:
        for m in mutants:
            problems = []
            for e in m.edits:
                try:
                    _target(ROOT, e)
                except Stale as exc:
                    problems.append(str(exc))
            problems += [f"{t}: no such test path" for t in m.tests if not (ROOT / t.split("::")[0]).exists()]
            state = "stale: " + "; ".join(problems) if problems else "applies"
            print(f"{m.name:42s} {state}\n    breaks: {m.breaks}\n    tests:  {' '.join(m.tests)}")
        return 0

    scratch = Path(tempfile.mkdtemp(prefix="sandloop-mutants-"))
    try:
        tree = scratch_copy(scratch)
        check_imports(tree)
        print(f"scratch tree: {tree}", flush=True)
        if not args.no_baseline:
            selection = sorted({t for m in mutants for t in m.tests})
            base = run_pytest(tree, selection, args.timeout * 2, stop_first=False)
            print(f"baseline, unmutated ({' '.join(selection)}): {base.last_line} "
                  f"in {base.seconds:.0f} s", flush=True)
            if base.code != 0:  # a selection that fails unmutated cannot judge a mutant
                print(f"the baseline is not green ({base.first_failure or base.last_line}): fix that first")
                return 1
        results: list[tuple[Mutant, Outcome]] = []
        for m in mutants:
            try:
                outcome = judge(tree, m, args.timeout)
            except Stale as exc:
                outcome = Outcome("stale", 0.0, str(exc))
            except SyntaxError as exc:
                outcome = Outcome("error", 0.0, f"the mutant does not compile: {exc}")
            results.append((m, outcome))
            print(_row(m.name, outcome), flush=True)
    finally:
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)

    counts: dict[str, int] = {}
    for _, outcome in results:
        counts[outcome.result] = counts.get(outcome.result, 0) + 1
    print("\n" + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + f" of {len(results)} mutants")
    for m, outcome in results:
        if outcome.result != "caught":
            print(f"  {outcome.result}: {m.name} — breaks: {m.breaks}")
    return 0 if all(o.result == "caught" for _, o in results) else 1


if __name__ == "__main__":
    sys.exit(main())
