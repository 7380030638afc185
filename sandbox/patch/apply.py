"""Apply a list of :class:`~sandbox.patch.v4a.FileOp` to a session, all or nothing.

The transaction has four phases, and nothing is written before the last one:

1. validate every path (lexically, :mod:`sandbox.patch.paths`) — nothing is read yet;
2. ask the caller's ``allow(path, kind)`` check for every operation — still nothing read;
3. read every file through the session and compute every new text (pure functions);
4. one ``session.commit([...])``, which the session applies atomically.

A path the patch refuses on its own — unsafe or read-only (phase 1), a directory, a symlink or
one the session refuses (phases 3 and 4) — is told to the caller's ``refused`` callback as a
DENY verdict with its rule, so that it is recorded like the policy's own refusals.

Operations see the effect of earlier ones in the same patch (add a file, then update it), so
the commit carries each path's final state once. Any failure raises the error of the operation
that failed, prefixed with which operation it was; the session has not been asked to write.
"""

from __future__ import annotations

import difflib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from sandbox.base import Session
from sandbox.patch import paths, v4a
from sandloop.errors import FileMissing, PathRefused, PolicyDenied, SandloopError
from sandloop.files import FileChange, PatchKind
from sandloop.verdict import Decision, Verdict

__all__ = ["PATH_RULE", "READ_ONLY_RULE", "Allow", "PatchResult", "Refused", "apply_operations",
           "path_refusal"]

Allow = Callable[[str, PatchKind], Awaitable[Verdict]]
#: told of a path the patch refused itself, with the refusal (a DENY naming its rule)
Refused = Callable[[str, PatchKind, Verdict], Awaitable[None]]

PATH_RULE = "files.path"  # not a regular file inside the workspace (the policy engine's rule too)
READ_ONLY_RULE = "files.read_only"  # covered by a read-only glob (the policy's list)

_VERBS = {"create": "created", "update": "updated", "delete": "deleted", "move": "moved"}
_DRY_VERBS = {"create": "would create", "update": "would update", "delete": "would delete",
              "move": "would move"}


@dataclass(frozen=True)
class PatchResult:
    """What a patch did (or, on a dry run, would do)."""

    summaries: tuple[str, ...]
    changes: tuple[FileChange, ...]
    dry_run: bool
    preview: str = ""  # a unified diff of the text changes, filled on dry runs

    @property
    def text(self) -> str:
        lines = list(self.summaries)
        if self.dry_run:
            lines.append("dry run: no file was changed")
        return "\n".join(lines)


class _NotAFile(PathRefused):
    """A path the session refused, or found to be no regular file: which one, for the record."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


@dataclass
class _Workspace:
    """The files as the patch sees them: session reads, overlaid with earlier operations."""

    session: Session
    keep_originals: bool = False  # read files about to be replaced, for a dry run's preview
    original: dict[str, bytes | None] = field(default_factory=dict)
    pending: dict[str, bytes | None] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)
    _known: dict[str, bool] = field(default_factory=dict)

    async def exists(self, path: str) -> bool:
        if path in self.pending:
            return self.pending[path] is not None
        if path not in self._known:
            try:
                info = await self.session.stat(path)
            except PathRefused as exc:
                raise _NotAFile(str(exc), path) from exc
            if info is not None and info.is_dir:
                raise _NotAFile(f"{path} is a directory", path)
            if info is not None and info.is_symlink:
                raise _NotAFile(f"{path} is a symlink; patch the file it points to instead", path)
            self._known[path] = info is not None
        return self._known[path]

    async def _original(self, path: str) -> bytes | None:
        if path not in self.original:
            try:
                self.original[path] = await self.session.read_file(path)
            except PathRefused as exc:
                raise _NotAFile(str(exc), path) from exc
        return self.original[path]

    async def read(self, path: str, kind: str) -> bytes:
        if path in self.pending:
            data = self.pending[path]
        elif not await self.exists(path):
            data = None
        else:
            data = await self._original(path)
        if data is None:
            hint = "; use create_file to make a new file" if kind == "update_file" else ""
            raise FileMissing(f"{path} does not exist{hint}")
        return data

    async def set(self, path: str, content: bytes | None, mode: int | None = None) -> None:
        if path not in self.pending:
            existed = await self.exists(path)
            if existed and self.keep_originals:
                await self._original(path)
        self.pending[path] = content
        if mode is not None:
            self.modes[path] = mode

    def existed(self, path: str) -> bool:
        return self._known.get(path, False)

    def changes(self) -> list[FileChange]:
        out: list[FileChange] = []
        for path, content in self.pending.items():
            existed = self._known.get(path, False)
            if content is None and not existed:
                continue  # created and deleted within the patch
            if path in self.original and content == self.original[path] and path not in self.modes:
                continue  # an update that changed nothing
            out.append(FileChange(path, content, self.modes.get(path)))
        return out


def path_refusal(path: str, read_only_globs: Sequence[str]) -> tuple[str, Verdict | None]:
    """(the path validated, normalized when it can be; the refusal with its rule, if refused)."""
    try:
        clean = paths.normalize(path)
    except PathRefused as exc:
        return path, Verdict(Decision.DENY, str(exc), PATH_RULE)
    try:
        return paths.validate(clean, read_only_globs), None
    except PathRefused as exc:  # a normalized path is refused only by a read-only glob
        return clean, Verdict(Decision.DENY, str(exc), READ_ONLY_RULE)


def _targets(op: v4a.FileOp) -> list[tuple[str, PatchKind]]:
    """The paths an operation names: a move's destination is created."""
    return [(op.path, op.kind)] + ([(op.move_to, "create_file")] if op.move_to is not None else [])


async def _tell(refused: Refused | None, path: str, kind: PatchKind, verdict: Verdict) -> None:
    if refused is not None:
        await refused(path, kind, verdict)


def _checks(op: v4a.FileOp) -> list[tuple[str, PatchKind]]:
    """The (path, kind) questions an operation asks the policy: a move also creates and deletes."""
    if op.kind == "update_file" and op.move_to is not None:
        return [(op.path, "update_file"), (op.move_to, "create_file"), (op.path, "delete_file")]
    return [(op.path, op.kind)]


def _counts(hunks: int, added: int, removed: int) -> str:
    return f"{hunks} hunk{'s' if hunks != 1 else ''}, +{added} \u2212{removed}"


async def _run_one(ws: _Workspace, op: v4a.FileOp, verbs: dict[str, str]) -> str:
    if op.kind == "create_file":
        replaced = await ws.exists(op.path)
        content = (op.content or "").encode("utf-8")
        await ws.set(op.path, content, op.mode)
        text = op.content or ""
        n = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
        note = ", replacing the existing file" if replaced else ""
        return f"{verbs['create']} {op.path} ({n} line{'s' if n != 1 else ''}){note}"
    if op.kind == "delete_file":
        if not await ws.exists(op.path):
            raise FileMissing(f"{op.path} does not exist")
        await ws.set(op.path, None)
        return f"{verbs['delete']} {op.path}"
    data = await ws.read(op.path, op.kind)
    applied = (
        v4a.apply_hunks(data, op.hunks, op.path, final_newline=op.final_newline)
        if op.hunks
        else v4a.Applied(data, 0, 0)
    )
    counts = _counts(len(op.hunks), applied.added, applied.removed)
    if op.move_to is not None and op.move_to != op.path:
        replaced = await ws.exists(op.move_to)
        await ws.set(op.move_to, applied.content, op.mode)
        await ws.set(op.path, None)
        note = f", replacing the existing {op.move_to}" if replaced else ""
        return f"{verbs['move']} {op.path} \u2192 {op.move_to}: {counts}{note}"
    await ws.set(op.path, applied.content, op.mode)
    return f"{verbs['update']} {op.path}: {counts}"


def _label(op: v4a.FileOp, index: int, total: int) -> str:
    where = f" (operation {index} of {total})" if total > 1 else ""
    return f"{op.kind} {op.path}{where}"


def _fail(exc: SandloopError, label: str) -> SandloopError:
    """The same error type, saying which operation failed and that nothing was written."""
    return type(exc)(f"{label}: {exc}\nNo file was changed.")


def _preview(ws: _Workspace, changes: Sequence[FileChange]) -> str:
    out: list[str] = []
    for change in changes:
        before = ws.original.get(change.path) or b""
        after = change.content or b""
        try:
            old, new = before.decode("utf-8"), after.decode("utf-8")
        except UnicodeDecodeError:
            out.append(f"Binary file {change.path} changes\n")
            continue
        out.extend(
            difflib.unified_diff(
                v4a.lines_with_endings(old),
                v4a.lines_with_endings(new),
                f"a/{change.path}" if change.path in ws.original else "/dev/null",
                f"b/{change.path}" if change.content is not None else "/dev/null",
            )
        )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in out)


async def apply_operations(
    session: Session,
    ops: Sequence[v4a.FileOp],
    *,
    allow: Allow,
    read_only_globs: Sequence[str] = paths.DEFAULT_READ_ONLY_GLOBS,
    dry_run: bool = False,
    refused: Refused | None = None,
) -> PatchResult:
    """Apply ``ops`` to ``session`` in one commit (or compute them only, when ``dry_run``);
    ``refused`` is told of every path refused here rather than by ``allow``."""
    total = len(ops)
    checked: list[v4a.FileOp] = []
    for index, op in enumerate(ops, 1):
        clean: list[str] = []
        for path, kind in _targets(op):
            name, refusal = path_refusal(path, read_only_globs)
            if refusal is not None:
                await _tell(refused, name, kind, refusal)
                raise _fail(PathRefused(refusal.justification), _label(op, index, total))
            clean.append(name)
        checked.append(replace(op, path=clean[0], move_to=clean[1] if op.move_to is not None else None))
    for index, op in enumerate(checked, 1):
        for path, kind in _checks(op):
            verdict = await allow(path, kind)
            if not verdict.allowed:
                rule = f" (rule {verdict.rule_id})" if verdict.rule_id else ""
                denied = PolicyDenied(f"{kind} {path}: {verdict.justification}{rule}")
                raise _fail(denied, _label(op, index, total))
    ws = _Workspace(session, keep_originals=dry_run)
    verbs = _DRY_VERBS if dry_run else _VERBS
    summaries: list[str] = []
    for index, op in enumerate(checked, 1):
        try:
            summaries.append(await _run_one(ws, op, verbs))
        except _NotAFile as exc:
            moved_to = exc.path == op.move_to and op.move_to != op.path
            await _tell(refused, exc.path, "create_file" if moved_to else op.kind,
                        Verdict(Decision.DENY, str(exc), PATH_RULE))
            raise _fail(PathRefused(str(exc)), _label(op, index, total)) from exc
        except SandloopError as exc:
            raise _fail(exc, _label(op, index, total)) from exc
    changes = ws.changes()
    if dry_run:
        return PatchResult(tuple(summaries), tuple(changes), True, _preview(ws, changes))
    if changes:
        try:
            await session.commit(changes)
        except PathRefused as exc:  # the session's own check, where the files live
            # The commit is refused whole, so no file of it was written: one record per file,
            # each under its own path (a joined list would be a path nobody named).
            for change in changes:
                what: PatchKind = ("delete_file" if change.content is None
                                   else "update_file" if ws.existed(change.path) else "create_file")
                await _tell(refused, change.path, what, Verdict(Decision.DENY, str(exc), PATH_RULE))
            raise
    return PatchResult(tuple(summaries), tuple(changes), False)
