"""Reading a run's files into its :class:`~executor.report.model.Run`.

Sources (every one optional but the request log):

* the request/response log (:mod:`executor.audit`): requests carry the previous turn's tool
  outputs, responses carry the calls, messages and reasoning; the last record of a finished
  run is its ``summary`` (``RunResult.to_json()`` under ``result``);
* the hash-chained decision log (:mod:`policies.audit`): one ``decision`` record per question
  the policy answered, keyed by ``call_id``; its chain is verified here;
* ``screenshots/<sha256>.<ext>`` beside the request log, named by the log's
  ``screenshot:sha256:<hex>`` references;
* ``summary.json`` in a run folder (the summary record, when the log lacks it);
* ``call`` records: a call answered with no Responses exchange around it (``sandloop mcp``
  logs each MCP tool call so, as the call item and its output in the Responses API's shapes);
  each is shown as a turn of its own.

Nothing here trusts the files: a line that is not JSON is counted and skipped, a field of the
wrong type reads as absent, and a screenshot reference is used only when it is 64 hex digits, so
a crafted log cannot name a file outside the screenshots folder. Decision records are redacted
as the request log is (the decision log keeps command lines as they were).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor.audit import redact
from executor.report.fields import (
    as_int,
    as_num,
    as_str,
    call_key,
    dicts,
    image_ref,
    jsonl,
    opt_str,
    output_key,
    pretty,
    text_of,
    timestamp,
)
from executor.report.files import RunFiles, RunNotFound, report_for, resolve
from executor.report.model import (
    AuditCheck,
    Call,
    ComputerView,
    Decision,
    Entry,
    Message,
    Note,
    Reasoning,
    Run,
    Turn,
    View,
)
from executor.report.views import actions, generic_view, patch_view, safety_checks, shell_view
from policies import audit as chain

__all__ = ["load_run"]

_NAVIGATED = re.compile(r"^now at (\S+)")
#: the first line of the developer message the loop sends beside outputs (executor.loop.harness_note)
_NOTES_HEAD = "sandloop notes about the tool calls just answered:"
_SHELL_TYPES = ("shell_call", "local_shell_call")


@dataclass
class _Log:
    """The records of one run, sorted by kind."""

    run_id: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    others: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    start: float | None = None
    end: float | None = None


def _read_log(path: Path, run_id: str | None, problems: list[str]) -> _Log:
    runs: dict[str, _Log] = {}
    order: list[str] = []
    for record in jsonl(path, problems):
        rid = as_str(record.get("run_id")) or "unnamed"
        if rid not in runs:
            runs[rid] = _Log(rid)
            order.append(rid)
        log = runs[rid]
        when = as_num(record.get("time"))
        if when is not None:
            log.start = when if log.start is None else min(log.start, when)
            log.end = when if log.end is None else max(log.end, when)
        kind = record.get("kind")
        if kind == "request" and isinstance(record.get("body"), dict):
            log.requests.append(record)
        elif kind == "response" and isinstance(record.get("body"), dict):
            log.responses.append(record)
        elif kind == "error":
            log.errors.append(record)
        elif kind == "call" and isinstance(record.get("item"), dict):
            log.calls.append(record)
        elif kind == "summary":
            log.summary = record
        else:
            log.others.append(record)
    if not order:
        raise RunNotFound(f"{path} holds no run")
    chosen = run_id if run_id is not None else order[-1]
    if chosen not in runs:
        raise RunNotFound(f"{path} holds no run {chosen!r} (runs: {', '.join(order)})")
    if len(order) > 1:
        problems.append(f"{path.name} holds {len(order)} runs; this report shows {chosen}")
    return runs[chosen]


def _read_summary(files: RunFiles, log: _Log, problems: list[str]) -> dict[str, Any] | None:
    if log.summary is not None:
        return log.summary
    if files.summary is None:
        return None
    try:
        data = json.loads(files.summary.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"{files.summary.name}: unreadable ({exc})")
        return None
    if not isinstance(data, dict):
        return None
    # Either the summary record, or the result itself.
    return data if isinstance(data.get("result"), dict) else {"result": data}


_META_KEYS = ("task", "model", "endpoint", "base_url", "policy", "policy_path", "policy_file",
              "policy_sha256", "placement", "browser", "runtime", "audit_head", "repo",
              "instructions", "sandloop_version")


def _meta(log: _Log, summary: dict[str, Any] | None) -> dict[str, Any]:
    """What the header shows, from the first request and any run-level record."""
    meta: dict[str, Any] = {}
    if log.requests:
        body = log.requests[0]["body"]
        meta["model"] = body.get("model")
        meta["instructions"] = body.get("instructions")
        meta["tools"] = [_tool_name(t) for t in dicts(body.get("tools"))]
        meta["stateless"] = body.get("store") is False
        first = body.get("input")
        if isinstance(first, str):
            meta["task"] = first
        else:
            users = [i for i in dicts(first) if i.get("role") == "user"]
            if users:
                meta["task"] = "\n\n".join(text_of(u.get("content")) for u in users)
    if log.responses:
        meta.setdefault("model", log.responses[-1]["body"].get("model"))
        meta["response_model"] = log.responses[-1]["body"].get("model")
    result = summary.get("result") if summary else None
    sources = [r for r in log.others if r.get("kind") in ("start", "meta", "run")]
    sources += [s for s in (summary, result) if isinstance(s, dict)]
    for source in sources:
        for key in _META_KEYS:
            value = source.get(key)
            if value not in (None, "", [], {}):
                meta[key] = value
    policy = meta.get("policy")
    if isinstance(policy, dict):  # {"path": …, "sha256": …}
        meta.setdefault("policy_path", policy.get("path") or policy.get("file"))
        meta.setdefault("policy_sha256", policy.get("sha256"))
    elif isinstance(policy, str):
        meta.setdefault("policy_path", policy)
    meta.setdefault("policy_path", meta.get("policy_file"))
    meta.setdefault("endpoint", meta.get("base_url"))
    meta.setdefault("placement", meta.get("browser"))
    for key in (*_META_KEYS, "tools", "stateless", "response_model"):
        meta.setdefault(key, None)
    return meta


def _tool_name(tool: Mapping[str, Any]) -> str:
    kind = as_str(tool.get("type"))
    name = tool.get("name") or tool.get("server_label")
    return f"{kind}:{name}" if isinstance(name, str) else kind


# -- decisions -----------------------------------------------------------------------------


def _decision(record: Mapping[str, Any]) -> Decision:
    return Decision(
        what=as_str(record.get("what") or record.get("action")),
        subject=as_str(record.get("subject")),
        decision=as_str(record.get("decision")),
        policy_decision=opt_str(record.get("policy_decision")),
        rule_id=opt_str(record.get("rule_id")),
        source=opt_str(record.get("source")),
        justification=as_str(record.get("justification")),
        approval=opt_str(record.get("approval")),
        seq=as_int(record.get("seq")),
    )


@dataclass
class _Decisions:
    by_call: dict[str, list[Decision]]
    outcomes: dict[str, list[dict[str, Any]]]
    policy_sha256: str | None
    records: int


def _read_decisions(path: Path | None, window: tuple[float, float] | None,
                    problems: list[str]) -> _Decisions:
    """Decision and outcome records by call id; ``window`` (start, end) keeps only this run's
    records of a log several runs share."""
    found = _Decisions({}, {}, None, 0)
    if path is None:
        return found
    literal = os.environ.get("OPENAI_API_KEY") or None
    for raw in jsonl(path, problems):
        found.records += 1
        if window is not None:
            when = timestamp(raw.get("ts"))
            if when is not None and not window[0] <= when <= window[1]:
                continue
        record = redact(raw, literal=literal)
        call_id = opt_str(record.get("call_id"))
        if call_id is None:
            continue
        if isinstance(record.get("policy_sha256"), str):
            found.policy_sha256 = record["policy_sha256"]
        if record.get("kind") == "decision":
            found.by_call.setdefault(call_id, []).append(_decision(record))
        elif record.get("kind") == "outcome":
            found.outcomes.setdefault(call_id, []).append(record)
    return found


def _verify(path: Path | None, head: Any, own: bool, records: int) -> AuditCheck:
    """Verify the chain, and against the head the run's summary kept (``audit_head``) when
    there is one: as a :class:`policies.audit.Head` where that exists (it vouches for the
    records up to it, whatever was appended after); else as the hash of the log's last line,
    which holds only for a log no later run appended to."""
    if path is None:
        return AuditCheck(None)
    check = AuditCheck(path, records=records)
    head_type = getattr(chain, "Head", None)
    try:
        if head and head_type is not None:
            try:
                anchor = head_type.from_json(head)
            except ValueError as exc:
                check.problems = [f"the run summary's audit_head is not a head: {exc}"]
                return check
            found = chain.check(path, head=anchor)  # type: ignore[attr-defined,unused-ignore]
            check.problems, check.after_head = list(found.problems), found.after_head
            check.head_checked = True
        elif head and own:
            digest = head.get("sha256") if isinstance(head, dict) else head
            check.problems = list(chain.verify(path, head=str(digest)))
            check.head_checked = True
        else:
            check.problems = list(chain.verify(path))
    except OSError as exc:
        check.problems = [f"unreadable: {exc}"]
    return check


@dataclass
class _Context:
    """What building a call needs to know beyond the call itself."""

    outputs: dict[str, dict[str, Any]]
    decisions: _Decisions
    records: dict[tuple[int, str], dict[str, Any]]
    stop: tuple[str, str]  # (reason, detail) of the run
    last_shot: str | None = None
    last_url: str | None = None
    url_from: str | None = None
    claimed: set[str] = field(default_factory=set)
    #: images the log kept inline rather than as files, by sha256
    inline: dict[str, bytes] = field(default_factory=dict)


def _is_patch(item: dict[str, Any]) -> bool:
    return item.get("type") == "apply_patch_call" or (
        item.get("type") == "custom_tool_call" and item.get("name") == "apply_patch")


def _computer(item: dict[str, Any], output: dict[str, Any] | None, decisions: list[Decision],
              told: list[Mapping[str, Any]], ctx: _Context) -> ComputerView:
    """A computer call's view: the actions, drawn on the screenshot before them (the previous
    computer call's), the one after, and the page's URL as far as the logs tell it."""
    after = None
    if output is not None and isinstance(output.get("output"), dict):
        after = image_ref(output["output"].get("image_url"), ctx.inline)
        url = opt_str(output["output"].get("current_url")) or opt_str(output.get("current_url"))
        if url:
            ctx.last_url, ctx.url_from = url, "the computer call's output"
    # The browser's own word, where a record carries it: a ``url`` field (the call's record, an
    # outcome record), or an outcome record of the computer action whose subject is the URL.
    url = next((u for u in (opt_str(r.get("url")) or (
        opt_str(r.get("subject")) if r.get("kind") == "outcome" and (r.get("action") or r.get("what")) == "computer"
        else None) for r in told) if u), None)
    if url:
        ctx.last_url, ctx.url_from = url, "the browser, after the actions"
    view = ComputerView(actions(item), ctx.last_shot, after, ctx.last_url, ctx.url_from,
                        safety_checks(item, output, decisions, ctx.stop))
    if after is not None:
        ctx.last_shot = after
    return view


def _call(item: dict[str, Any], turn: int, ctx: _Context) -> Call:
    key = call_key(item) or ""
    kind = as_str(item.get("type"))
    output = ctx.outputs.get(key)
    decisions = ctx.decisions.by_call.get(key, []) if key else []
    ctx.claimed.add(key)
    outcomes = ctx.decisions.outcomes.get(key, [])
    record = ctx.records.get((turn, key), {})
    view: View
    if kind in _SHELL_TYPES:
        view = shell_view(item, output, decisions, outcomes)
    elif _is_patch(item):
        view = patch_view(item, output, decisions)
    elif kind == "computer_call":
        view = _computer(item, output, decisions, [*outcomes, record], ctx)
    else:
        view = generic_view(item, output, ctx.inline)
        if kind == "function_call" and output is not None:
            moved = _NAVIGATED.match(as_str(output.get("output")))
            if moved:
                ctx.last_url, ctx.url_from = moved.group(1), f"{as_str(item.get('name'))}()"
    return Call(key, kind, turn, item, output, decisions, view, record,
                background=bool(record.get("background")))


# -- the whole run -------------------------------------------------------------------------


def _outputs(requests: Iterable[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[int, list[str]]]:
    """Every tool output the requests carried (the first time each was sent: a stateless run
    sends them again every turn), and the notes sandloop sent beside them, by turn."""
    outputs: dict[str, dict[str, Any]] = {}
    notes: dict[int, list[str]] = {}
    seen_notes: set[str] = set()
    for record in requests:
        turn = as_int(record.get("turn")) or 0
        for item in dicts(record["body"].get("input")):
            key = output_key(item)
            if key is not None:
                outputs.setdefault(key, item)
            elif item.get("role") == "developer":
                text = text_of(item.get("content"))
                if text.startswith(_NOTES_HEAD) and text not in seen_notes:
                    seen_notes.add(text)
                    # sent with turn N's request, about the calls of turn N-1
                    notes.setdefault(turn - 1, []).append(text[len(_NOTES_HEAD):].strip())
    return outputs, notes


def _summary_records(result: Mapping[str, Any] | None) -> tuple[dict[int, dict[str, Any]],
                                                                 dict[tuple[int, str], dict[str, Any]]]:
    turns: dict[int, dict[str, Any]] = {}
    calls: dict[tuple[int, str], dict[str, Any]] = {}
    for turn in dicts((result or {}).get("turns")):
        index = as_int(turn.get("index"))
        if index is None:
            continue
        turns[index] = turn
        for call in dicts(turn.get("calls")):
            calls[(index, as_str(call.get("call_id")))] = call
    return turns, calls


def _entries(body: Mapping[str, Any], turn: int, ctx: _Context) -> list[Entry]:
    entries: list[Entry] = []
    for item in dicts(body.get("output")):
        kind = item.get("type")
        if kind == "message":
            content = item.get("content")
            refusal = any(p.get("type") == "refusal" for p in dicts(content))
            entries.append(Message(as_str(item.get("role")) or "assistant", text_of(content),
                                   refusal, opt_str(item.get("phase"))))
        elif kind == "reasoning":
            texts = [as_str(p.get("text")) for p in dicts(item.get("summary"))]
            texts += [as_str(p.get("text")) for p in dicts(item.get("content"))]
            if any(texts):
                entries.append(Reasoning([t for t in texts if t]))
        elif _client_call(item):
            entries.append(_call(item, turn, ctx))
        elif isinstance(kind, str):
            entries.append(Note(f"{kind}\n{pretty(item)}", "hosted"))
    return entries


def _client_call(item: Mapping[str, Any]) -> bool:
    """A call the client answers (the server runs hosted tools and remote shells itself)."""
    kind = item.get("type")
    if kind not in _CLIENT_CALLS or call_key(item) is None:
        return False
    if kind == "tool_search_call":
        return item.get("execution") == "client"
    if kind == "shell_call":
        env = item.get("environment")
        return not isinstance(env, dict) or env.get("type") == "local"
    return True


#: call item types the client answers (others in a response are the server's own)
_CLIENT_CALLS = frozenset({"function_call", "custom_tool_call", "shell_call", "local_shell_call",
                           "apply_patch_call", "computer_call", "tool_search_call",
                           "mcp_approval_request"})


def load_run(target: Path | str | None = None, *, run_id: str | None = None,
             state: Path | None = None) -> Run:
    """Read a run (a run folder, a request log, or None for the latest) into its timeline."""
    files = resolve(target, state=state)
    problems: list[str] = []
    log = _read_log(files.requests, run_id, problems)
    summary = _read_summary(files, log, problems)
    result = summary.get("result") if summary is not None else None
    result = result if isinstance(result, dict) else None
    meta = _meta(log, summary)
    window = None
    if not files.own_audit and log.start is not None:
        window = (log.start - 1.0, (log.end or log.start) + 1.0)
    decisions = _read_decisions(files.audit, window, problems)
    if decisions.policy_sha256:
        meta.setdefault("policy_sha256", decisions.policy_sha256)
    outputs, notes = _outputs(log.requests)
    for record in log.calls:
        output = record.get("output")
        if isinstance(output, dict) and (key := output_key(output)) is not None:
            outputs.setdefault(key, output)
    turn_records, call_records = _summary_records(result)
    stop = (as_str((result or {}).get("reason")), as_str((result or {}).get("detail")))
    ctx = _Context(outputs, decisions, call_records, stop)

    turns: dict[int, Turn] = {}
    for record in log.responses:
        index = as_int(record.get("turn")) or len(turns) + 1
        body = record["body"]
        turn = turns.get(index)
        if turn is not None:  # the one retry after an incomplete response: it replaces it
            turn.retried = True
            turn.entries = [e for e in turn.entries if isinstance(e, Note)]
        else:
            turn = turns[index] = Turn(index)
        turn.response_id = opt_str(body.get("id"))
        turn.status = opt_str(body.get("status"))
        turn.usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        turn.entries.extend(_entries(body, index, ctx))
        if turn.status not in (None, "completed"):
            why = body.get("incomplete_details") or body.get("error")
            turn.entries.append(Note(f"response {turn.status}: {pretty(why)}", "error"))
    for record in log.calls:
        index = as_int(record.get("turn")) or len(turns) + 1
        turn = turns.setdefault(index, Turn(index, status=f"{as_str(record.get('tool')) or 'tool'} call"))
        turn.tools_s = as_num(record.get("duration_s"))
        turn.entries.append(_call(record["item"], index, ctx))
    for record in log.errors:
        index = as_int(record.get("turn")) or len(turns) + 1
        turn = turns.setdefault(index, Turn(index))
        status = record.get("status")
        turn.entries.append(Note(f"API error{f' {status}' if status else ''}: "
                                 f"{pretty(record.get('body'))}", "error"))
    for index, texts in notes.items():
        if index in turns:
            turns[index].entries.extend(Note(t) for t in texts)
    for index, turn in turns.items():
        data = turn_records.get(index, {})
        turn.request_s = as_num(data.get("request_s"))
        turn.tools_s = as_num(data.get("tools_s")) if data else turn.tools_s
        turn.retried = turn.retried or bool(data.get("retried"))

    # When the log is the run's own, decisions no call claims are shown apart; in a log several
    # runs share they may be another run's, so they are left out.
    stray = [d for key, ds in decisions.by_call.items() if key not in ctx.claimed for d in ds] \
        if files.own_audit else []
    files = dataclasses.replace(files, report=report_for(files, log.run_id))
    audit = _verify(files.audit, meta.get("audit_head"), files.own_audit, decisions.records)
    return Run(files, log.run_id, meta, result, [turns[i] for i in sorted(turns)], audit, stray,
               problems, ctx.inline)
