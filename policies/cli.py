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
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from policies import audit
from policies.cli_output import emit as _emit
from policies.cli_output import explained, explained_lines, json_line, located, summary_line
from policies.cli_output import verdict_data as _verdict
from policies.engine import Decider, PolicyEngine, example_problems, load_policy
from policies.lint import ERROR, NOTE, lint
from policies.problems import PolicyLoadError, Problem
from sandloop.text import visible
from sandloop.verdict import Verdict

# The schema's models (pydantic) are imported by the commands that validate a file, and rich by
# those that print markup or tables: a scripted ``policy explain`` decides from a snapshot of the
# policy (policies.snapshot) and prints plain lines, and starts faster without either.
if TYPE_CHECKING:
    from rich.console import Console

    from policies.shell_words import SimpleCommand

__all__ = ["register"]

EXIT_CODES = "exit codes: 0 ok · 1 findings, failing tests or changed decisions · 2 usage or load error"


def _out() -> Console:
    from rich.console import Console

    return Console(file=sys.stdout, soft_wrap=True, highlight=False)


def _err() -> Console:
    from rich.console import Console

    return Console(file=sys.stderr, soft_wrap=True, highlight=False)


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
    found = lint(engine)
    findings = [f for f in found if f.severity == ERROR]
    notes = [f for f in found if f.severity == NOTE]
    if args.json:
        _emit({"ok": not findings, "sha256": engine.sha256, "rules": len(engine.rules),
               "findings": [f.as_dict() for f in findings], "notes": [f.as_dict() for f in notes]})
    else:
        from rich.markup import escape

        console = _out()
        console.print(f"{args.file}: schema ok, {len(engine.rules)} rules, inline examples pass, "
                      f"sha256 {engine.sha256}")
        for f in findings:
            console.print(f"[yellow]{f.code}[/yellow] {escape(f.source)} {escape(f.rule_id or '')}: "
                          f"{escape(f.message)}")
        for f in notes:
            console.print(f"note {f.code} {escape(f.source)} {escape(f.rule_id or '')}: {escape(f.message)}")
        console.print(("no findings" if not findings else f"{len(findings)} finding(s)")
                      + (f" ({len(notes)} note(s): lines of a shipped preset this file extends and does not "
                         "change; they do not fail the check)" if notes else ""))
    return 1 if findings else 0


# --- policy explain ----------------------------------------------------------------------------


def _command_line(words: list[str]) -> str:
    words = words[1:] if words[:1] == ["--"] else words
    return words[0] if len(words) == 1 else shlex.join(words)


def _explain(args: argparse.Namespace) -> int:
    from policies import snapshot

    asked = [bool(args.command), args.patch is not None, args.url is not None, args.stdin or args.nul]
    if sum(asked) != 1:
        print("explain needs exactly one of: -- 'command line', --patch OP.json, --url URL, --stdin",
              file=sys.stderr)
        return 2
    try:
        engine = snapshot.decider(args.file)
    except PolicyLoadError as exc:
        return _load_errors(args, exc.problems)
    if args.stdin or args.nul:
        return _explain_each(engine, args)
    decided: list[tuple[SimpleCommand, Verdict]] = []
    if args.command:
        subject = _command_line(args.command)
        decided = engine.explain_shell(subject)
        verdict = engine.shell(subject)
    elif args.patch is not None:
        try:
            op = json.loads(Path(args.patch).read_text())
            path, kind = op["path"], op.get("type") or op["kind"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(visible(f"{args.patch}: need a JSON object with path and type: {exc}"), file=sys.stderr)
            return 2
        size = len(op.get("diff", "").encode()) if isinstance(op.get("diff"), str) else None
        verdict = engine.patch(path, kind, size_bytes=size)
        subject = f"{kind} {path}"
    else:
        verdict = engine.url(args.url)
        subject = args.url
    if args.json:
        _emit(explained(subject, verdict, decided))
    else:
        print("\n".join(explained_lines(subject, verdict, decided)))
    return 0


def _records(nul: bool) -> Iterator[bytes]:
    """stdin's records: lines (read as they come, so a script can ask one at a time), or with
    ``-z`` NUL-terminated ones (a command line may then hold newlines)."""
    stream = sys.stdin.buffer
    if nul:
        records = stream.read().split(b"\0")
        yield from records[:-1] if records[-1] == b"" else records
    else:
        for raw in stream:
            yield raw.removesuffix(b"\n")


def _explain_each(engine: Decider, args: argparse.Namespace) -> int:
    """``explain --stdin``: one command line per record, one verdict per line out (JSON Lines
    with --json), in order: the policy is loaded once for all of them."""
    failed = 0
    for number, raw in enumerate(_records(args.nul), start=1):
        try:
            line = raw.decode()
        except UnicodeDecodeError:
            failed += 1
            problem = f"record {number} is not UTF-8: not decided"
            print(json_line({"record": number, "error": problem}) if args.json else problem, flush=True)
            continue
        verdict = engine.shell(line)
        if args.json:
            print(json_line(explained(line, verdict, engine.explain_shell(line))), flush=True)
        else:
            print(summary_line(line, verdict), flush=True)
    return 2 if failed else 0


# --- policy test -------------------------------------------------------------------------------


def _test(args: argparse.Namespace) -> int:
    try:
        engine = _load(args.file, check_examples=False)
        from policies.cases import read_cases

        cases = read_cases(Path(args.cases)) if args.cases else []
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
                            f"by {v.rule_id or 'the default'} ({located(v)})")
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
            from rich.table import Table

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
    from policies.model import json_schema

    _emit(json_schema())
    return 0


VERIFY_HELP = "check an audit log's hash chain, and with --head/--summary that its tail is all there"
VERIFY_DESCRIPTION = f"""\
Check an audit log's hash chain (every record hashes itself and the line before it).

Detected: any edit to a record (even one byte, even the last line's); a record removed from
inside the chain; records reordered; a line that is not a record. With the head kept at the end
of a run (--head HASH[:COUNT], or --summary RUN.json): records removed from the end (a cut
tail), and any change to the records up to the head, even a rewrite that recomputed every hash.

Not detected: a cut tail, or a whole log rewritten with recomputed hashes, when no head is
given (a shorter chain is still a chain); a rewrite of both the log and the head, by someone
who can reach where the head is kept (the chain is not signed). Records after the head (a
later run appending to the same log) are chained, but only a newer head vouches for them.

A run summary keeps the head under "{audit.SUMMARY_KEY}" (top level or under "result") as
{{"sha256": HASH, "records": COUNT}}."""


def _head_arg(text: str) -> audit.Head:
    try:
        return audit.Head.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _audit_verify(args: argparse.Namespace) -> int:
    head: audit.Head | None = args.head
    try:
        if args.summary is not None:
            head = audit.head_from_summary(args.summary)
        found = audit.check(args.log, head=head)
    except (OSError, ValueError) as exc:
        text = str(exc) if isinstance(exc, ValueError) else f"{exc.filename or args.log}: {exc.strerror or exc}"
        if isinstance(exc, FileNotFoundError) and head is None:
            # a run that decided nothing wrote no log: only its head can tell that from a lost one
            text += " (a run that decided nothing has no log: give its head, --summary or --head, to check it)"
        if args.json:
            _emit({"ok": False, "errors": [text]})
        else:
            _err().print(text)
        return 2
    problems = found.problems
    if args.json:
        _emit({"ok": not problems, "problems": problems, "records": found.head.records,
               "log_head": str(found.head), "head": None if head is None else str(head),
               "after_head": found.after_head})
        return 1 if problems else 0
    console = _out()
    for p in problems:
        console.print(f"[red]{p}[/red]", markup=True)
    if problems:
        console.print(f"{len(problems)} problem(s)")
    elif head is None:
        console.print(f"chain intact: {found.head.records} records (no head given: records cut "
                      "from the end would not show; pass --head or --summary)")
    else:
        console.print(f"chain intact: {found.head.records} records, every one up to the head "
                      f"{head} unchanged")
        if found.after_head:
            console.print(f"{found.after_head} record(s) after the head: chained, but only a "
                          "newer head vouches for them")
    console.print(f"this log's head now: {found.head}")
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
    from rich.table import Table

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


def _leaf(group: Any, name: str, help_text: str, func: Any,
          description: str | None = None) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = group.add_parser(
        name, help=help_text, description=description or help_text, epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter if description else argparse.HelpFormatter)
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
              "(explain FILE --json -- 'git push origin main')", _explain)
    p.add_argument("file", help=spec)
    p.add_argument("--patch", metavar="OP.json", help="an apply_patch operation {type, path, diff}")
    p.add_argument("--url", help="a URL the browser would open")
    p.add_argument("--stdin", action="store_true",
                   help="decide every line of stdin as a command line: one verdict per line out "
                   "(JSON Lines with --json), one policy load for all of them")
    p.add_argument("-z", dest="nul", action="store_true",
                   help="with --stdin: records end with NUL, not newline (command lines may hold newlines)")
    p.add_argument("command", nargs="*", help="-- 'the command line' (or its words after --)")
    p.set_defaults(words_after_dashes="command")

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
    p = _leaf(group, "verify", VERIFY_HELP, _audit_verify, VERIFY_DESCRIPTION)
    p.add_argument("log", help="an audit log (audit.jsonl)")
    anchor = p.add_mutually_exclusive_group()
    anchor.add_argument("--head", type=_head_arg, metavar="HASH[:COUNT]",
                        help="the head printed at the end of a run (detects a cut tail)")
    anchor.add_argument("--summary", metavar="RUN.json",
                        help=f"read the head from a run summary's {audit.SUMMARY_KEY!r} key")
    p = _leaf(group, "summary", "decisions per rule, refused commands, files, domains",
              _audit_summary)
    p.add_argument("log", help="an audit log (audit.jsonl)")
