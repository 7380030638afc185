"""``sandloop policy …`` and ``sandloop audit …``: the commands auditors run.

:func:`register` adds both groups to an argparse sub-parser set; every leaf command sets
``func`` (parsed args → exit code). Exit codes: 0 ok, 1 findings / failures / changes,
2 usage or load errors.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from rich.console import Console
from rich.table import Table

from policies import audit
from policies.engine import PolicyEngine, example_problems, load_policy
from policies.lint import lint
from policies.model import Layer, PolicyLoadError, Problem, json_schema, key_lines
from policies.model import validation_problems as _problems_of
from sandloop.verdict import Decision, Verdict

__all__ = ["register"]

EXIT_CODES = "exit codes: 0 ok · 1 findings, failing tests or changed decisions · 2 usage or load error"


def _out() -> Console:
    return Console(file=sys.stdout, soft_wrap=True, highlight=False)


def _err() -> Console:
    return Console(file=sys.stderr, soft_wrap=True, highlight=False)


def _emit(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _verdict(v: Verdict) -> dict[str, str | None]:
    return {"decision": v.decision.value, "rule_id": v.rule_id, "source": v.source,
            "justification": v.justification}


def _load_errors(args: argparse.Namespace, problems: list[Problem]) -> int:
    if getattr(args, "json", False):
        _emit({"ok": False, "errors": [str(p) for p in problems]})
    else:
        for p in problems:
            _err().print(f"[red]error[/red] {p}", markup=True)
    return 2


def _load(spec: str, *, check_examples: bool = True) -> PolicyEngine:
    return load_policy(spec, check_examples=check_examples)


# --- policy check ------------------------------------------------------------------------------


def _check(args: argparse.Namespace) -> int:
    try:
        engine = _load(args.file)
    except PolicyLoadError as exc:
        return _load_errors(args, exc.problems)
    findings = lint(engine)
    if args.json:
        _emit({"ok": not findings, "sha256": engine.sha256, "rules": len(engine.rules),
               "findings": [f.as_dict() for f in findings]})
    else:
        console = _out()
        console.print(f"{args.file}: schema ok, {len(engine.rules)} rules, inline examples pass, "
                      f"sha256 {engine.sha256}")
        for f in findings:
            console.print(f"[yellow]{f.code}[/yellow] {f.source} {f.rule_id or ''}: {f.message}")
        console.print("no findings" if not findings else f"{len(findings)} finding(s)")
    return 1 if findings else 0


# --- policy explain ----------------------------------------------------------------------------


def _command_line(words: list[str]) -> str:
    words = words[1:] if words[:1] == ["--"] else words
    return words[0] if len(words) == 1 else shlex.join(words)


def _explain(args: argparse.Namespace) -> int:
    try:
        engine = _load(args.file)
    except PolicyLoadError as exc:
        return _load_errors(args, exc.problems)
    asked = [bool(args.command), args.patch is not None, args.url is not None]
    if sum(asked) != 1:
        _err().print("explain needs exactly one of: -- 'command line', --patch OP.json, --url URL")
        return 2
    rows: list[dict[str, Any]] = []
    if args.command:
        line = _command_line(args.command)
        for cmd, v in engine.explain_shell(line):
            rows.append({"command": cmd.text, "argv": [str(w) for w in cmd.argv],
                         "unknown": cmd.unknown, **_verdict(v)})
        verdict = engine.shell(line)
        subject = line
    elif args.patch is not None:
        try:
            op = json.loads(Path(args.patch).read_text())
            path, kind = op["path"], op.get("type") or op["kind"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _err().print(f"{args.patch}: need a JSON object with path and type: {exc}")
            return 2
        size = len(op.get("diff", "").encode()) if isinstance(op.get("diff"), str) else None
        verdict = engine.patch(path, kind, size_bytes=size)
        subject = f"{kind} {path}"
    else:
        verdict = engine.url(args.url)
        subject = args.url
    if args.json:
        _emit({"input": subject, "verdict": _verdict(verdict), "commands": rows})
        return 0
    console = _out()
    for r in rows:
        console.print(f"  {r['decision']:<6} {r['command']}\n         by {r['rule_id'] or 'the default'}"
                      f" at {r['source']}: {r['justification']}", markup=False)
    console.print(f"{subject!r} → [bold]{verdict.decision.value}[/bold] by "
                  f"{verdict.rule_id or 'the default'} ({verdict.source or 'built-in'}): "
                  f"{verdict.justification}", markup=True)
    return 0


# --- policy test -------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _PatchCase(_Strict):
    path: str
    kind: str


class _McpCase(_Strict):
    server: str
    tool: str


class Case(_Strict):
    """One ``[[case]]`` of a CASES.toml: exactly one subject, and the expected decision."""

    command: str | None = None
    patch: _PatchCase | None = None
    url: str | None = None
    mcp: _McpCase | None = None
    function: str | None = None
    decision: Decision
    rule: str | None = None  # expected rule id, when it matters

    @model_validator(mode="after")
    def _one_subject(self) -> Case:
        given = [self.command, self.patch, self.url, self.mcp, self.function]
        if sum(x is not None for x in given) != 1:
            raise ValueError("a case needs exactly one of command, patch, url, mcp, function")
        return self

    def subject(self) -> str:
        if self.patch is not None:
            return f"patch {self.patch.kind} {self.patch.path}"
        if self.mcp is not None:
            return f"mcp {self.mcp.server}/{self.mcp.tool}"
        if self.function is not None:
            return f"function {self.function}"
        return self.command if self.command is not None else f"url {self.url}"

    def run(self, engine: PolicyEngine) -> Verdict:
        if self.patch is not None:
            return engine.patch(self.patch.path, self.patch.kind)
        if self.mcp is not None:
            return engine.mcp(self.mcp.server, self.mcp.tool)
        if self.function is not None:
            return engine.function(self.function)
        if self.url is not None:
            return engine.url(self.url)
        return engine.shell(self.command or "")


class CaseFile(_Strict):
    case: list[Case]


def _read_cases(path: Path) -> list[Case]:
    text = path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyLoadError([Problem(str(path), None, f"invalid TOML: {exc}")]) from exc
    try:
        return CaseFile.model_validate(data).case
    except ValidationError as exc:
        layer = Layer(name=str(path), path=path, text=text, data=data, lines=key_lines(text))
        raise PolicyLoadError(_problems_of(layer, data, exc)) from exc


def _test(args: argparse.Namespace) -> int:
    try:
        engine = _load(args.file, check_examples=False)
        cases = _read_cases(Path(args.cases)) if args.cases else []
    except PolicyLoadError as exc:
        return _load_errors(args, exc.problems)
    except OSError as exc:
        _err().print(f"{args.cases}: {exc}")
        return 2
    failures = [str(p) for p in example_problems(engine)]
    examples = sum(len(r.rule.match) + len(r.rule.not_match) for r in engine.rules)
    results = []
    for case in cases:
        v = case.run(engine)
        ok = v.decision is case.decision and (case.rule is None or v.rule_id == case.rule)
        results.append({"case": case.subject(), "ok": ok, "expected": case.decision.value,
                        "expected_rule": case.rule, **_verdict(v)})
        if not ok:
            failures.append(f"{case.subject()!r}: expected {case.decision.value}"
                            f"{' by ' + case.rule if case.rule else ''}, got {v.decision.value} "
                            f"by {v.rule_id or 'the default'} ({v.source})")
    if args.json:
        _emit({"ok": not failures, "examples": examples, "cases": results, "failures": failures})
    else:
        console = _out()
        for f in failures:
            console.print(f"[red]FAIL[/red] {f}", markup=True)
        passed = examples + len(cases) - len(failures)
        console.print(f"{passed} passed, {len(failures)} failed ({examples} inline examples, "
                      f"{len(cases)} cases)")
    return 1 if failures else 0


# --- policy diff -------------------------------------------------------------------------------

_PATCH_PROBES = (".git/config", "README.md", "src/main.py", "docs/new.md")


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def _corpus(old: PolicyEngine, new: PolicyEngine, path: str | None) -> list[str]:
    lines: list[str] = []
    for engine in (old, new):
        for rule in engine.rules:
            lines.extend(rule.rule.match)
            lines.extend(rule.rule.not_match)
    if path:
        for raw in Path(path).read_text(encoding="utf-8").splitlines():
            if raw.strip() and not raw.lstrip().startswith("#"):
                lines.append(raw)
    return list(dict.fromkeys(lines))


def _urls(old: PolicyEngine, new: PolicyEngine) -> list[str]:
    urls = ["https://example.com/", "about:blank", "file:///etc/passwd"]
    for engine in (old, new):
        b = engine.policy.browser
        for entry in [*b.allow_domains, *b.block_domains]:
            if entry != "*":
                urls.append(f"https://{entry.replace('*.', 'www.')}/")
    return list(dict.fromkeys(urls))


def _diff(args: argparse.Namespace) -> int:
    try:
        old, new = _load(args.old), _load(args.new)
        commands = _corpus(old, new, args.corpus)
    except PolicyLoadError as exc:
        return _load_errors(args, exc.problems)
    except OSError as exc:
        _err().print(f"{args.corpus}: {exc}")
        return 2
    subjects: list[tuple[str, Verdict, Verdict]] = []
    subjects += [(c, old.shell(c), new.shell(c)) for c in commands]
    for path in _PATCH_PROBES:
        for kind in ("create_file", "update_file", "delete_file"):
            subjects.append((f"patch {kind} {path}", old.patch(path, kind), new.patch(path, kind)))
    subjects += [(f"url {u}", old.url(u), new.url(u)) for u in _urls(old, new)]
    changed = [(s, a, b) for s, a, b in subjects if a.decision is not b.decision]
    skip = {"shell.rules", "extends", "description"}
    before = {k: v for k, v in _flatten(old.policy.model_dump(mode="json")).items() if k not in skip}
    after = {k: v for k, v in _flatten(new.policy.model_dump(mode="json")).items() if k not in skip}
    settings = [(k, before.get(k), after.get(k)) for k in sorted(before.keys() | after.keys())
                if before.get(k) != after.get(k)]
    if args.json:
        _emit({"checked": len(subjects),
               "changed": [{"input": s, "old": _verdict(a), "new": _verdict(b)}
                           for s, a, b in changed],
               "settings": [{"key": k, "old": a, "new": b} for k, a, b in settings]})
    else:
        console = _out()
        if changed:
            table = Table("input", "old", "new")
            for s, a, b in changed:
                table.add_row(s, f"{a.decision.value} ({a.rule_id or 'default'})",
                              f"{b.decision.value} ({b.rule_id or 'default'})")
            console.print(table)
        for key, was, now in settings:
            console.print(f"setting {key}: {was!r} → {now!r}")
        console.print(f"{len(changed)} of {len(subjects)} decisions change; "
                      f"{len(settings)} setting(s) differ")
    return 1 if changed or settings else 0


# --- policy schema, audit ----------------------------------------------------------------------


def _schema(args: argparse.Namespace) -> int:
    _emit(json_schema())
    return 0


def _audit_verify(args: argparse.Namespace) -> int:
    try:
        problems = audit.verify(args.log, head=args.head)
    except OSError as exc:
        _err().print(f"{args.log}: {exc}")
        return 2
    if args.json:
        _emit({"ok": not problems, "problems": problems})
    else:
        console = _out()
        for p in problems:
            console.print(f"[red]{p}[/red]", markup=True)
        console.print("chain intact" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def _audit_summary(args: argparse.Namespace) -> int:
    try:
        data = audit.summary(args.log)
    except OSError as exc:
        _err().print(f"{args.log}: {exc}")
        return 2
    if args.json:
        _emit(data)
        return 0
    console = _out()
    console.print(f"{data['records']} records, {data['decisions']} decisions")
    table = Table("rule → decision", "count")
    for key, count in data["per_rule"].items():
        table.add_row(key, str(count))
    console.print(table)
    for title, key in (("denied commands", "denied_commands"),
                       ("prompted commands", "prompted_commands"),
                       ("files changed", "files_changed")):
        console.print(f"{title}: {len(data[key])}")
        for item in data[key]:
            console.print(f"  {item}")
    console.print("domains visited: " + (", ".join(data["domains_visited"]) or "none"))
    return 0


# --- wiring ------------------------------------------------------------------------------------


def _leaf(group: Any, name: str, help_text: str, func: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = group.add_parser(
        name, help=help_text, description=help_text, epilog=EXIT_CODES)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=func)
    return parser


def register(subparsers: Any) -> None:
    """Add ``policy`` and ``audit`` (with their subcommands) to an argparse sub-parser set."""
    policy = subparsers.add_parser("policy", help="check, explain, test and diff policy files",
                                   epilog=EXIT_CODES)
    group = policy.add_subparsers(dest="policy_command", required=True)
    spec = "a policy file, or a preset name (default, strict, ci)"

    p = _leaf(group, "check", "validate a policy (schema, inline examples) and lint it", _check)
    p.add_argument("file", help=spec)

    p = _leaf(group, "explain", "show which rule decides a command, patch or URL, and why "
              "(options go before FILE: explain --json FILE -- 'git push origin main')", _explain)
    p.add_argument("file", help=spec)
    p.add_argument("--patch", metavar="OP.json", help="an apply_patch operation {type, path, diff}")
    p.add_argument("--url", help="a URL the browser would open")
    p.add_argument("command", nargs="*", help="-- 'the command line' (or its words after --)")

    p = _leaf(group, "test", "run the inline examples and a CASES.toml of expected decisions",
              _test)
    p.add_argument("file", help=spec)
    p.add_argument("cases", nargs="?", help="[[case]] tables: command|patch|url|mcp|function, "
                   "decision, optional rule")

    p = _leaf(group, "diff", "which decisions change between two policies", _diff)
    p.add_argument("old", help=spec)
    p.add_argument("new", help=spec)
    p.add_argument("--corpus", metavar="FILE", help="extra command lines, one per line")

    _leaf(group, "schema", "print the JSON Schema of the policy format (for editors)", _schema)

    log = subparsers.add_parser("audit", help="verify and summarise audit logs", epilog=EXIT_CODES)
    group = log.add_subparsers(dest="audit_command", required=True)
    p = _leaf(group, "verify", "detect any edit, deletion or reordering in an audit log",
              _audit_verify)
    p.add_argument("log")
    p.add_argument("--head", help="the expected hash of the last line (detects a cut tail)")
    p = _leaf(group, "summary", "decisions per rule, refused commands, files, domains",
              _audit_summary)
    p.add_argument("log")
