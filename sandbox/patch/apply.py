"""Apply a list of :class:`~sandbox.patch.v4a.FileOp` to a session, all or nothing.

The transaction has four phases, and nothing is written before the last one:

1. validate every path (lexically, :mod:`sandbox.patch.paths`) — nothing is read yet;
2. ask the caller's ``allow(path, kind)`` check for every operation — still nothing read;
3. read every file through the session and compute every new text (pure functions);
4. one ``session.commit([...])``, which the session applies atomically.

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
from sandloop.verdict import Verdict

__all__ = ["Allow", "PatchResult", "apply_operations"]

Allow = Callable[[str, PatchKind], Awaitable[Verdict]]

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
            info = await self.session.stat(path)
            if info is not None and info.is_dir:
                raise PathRefused(f"{path} is a directory")
            if info is not None and info.is_symlink:
                raise PathRefused(f"{path} is a symlink; patch the file it points to instead")
            self._known[path] = info is not None
        return self._known[path]

    async def read(self, path: str, kind: str) -> bytes:
        if path in self.pending:
            data = self.pending[path]
        elif not await self.exists(path):
            data = None
        else:
            if path not in self.original:
                self.original[path] = await self.session.read_file(path)
            data = self.original[path]
        if data is None:
            hint = "; use create_file to make a new file" if kind == "update_file" else ""
            raise FileMissing(f"{path} does not exist{hint}")
        return data

    async def set(self, path: str, content: bytes | None, mode: int | None = None) -> None:
        if path not in self.pending:
            existed = await self.exists(path)
            if existed and self.keep_originals and path not in self.original:
                self.original[path] = await self.session.read_file(path)
        self.pending[path] = content
        if mode is not None:
            self.modes[path] = mode

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


def _validated(op: v4a.FileOp, read_only_globs: Sequence[str]) -> v4a.FileOp:
    move_to = op.move_to
    if move_to is not None:
        move_to = paths.validate(move_to, read_only_globs)
    return replace(op, path=paths.validate(op.path, read_only_globs), move_to=move_to)


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
) -> PatchResult:
    """Apply ``ops`` to ``session`` in one commit (or compute them only, when ``dry_run``)."""
    total = len(ops)
    checked: list[v4a.FileOp] = []
    for index, op in enumerate(ops, 1):
        try:
            checked.append(_validated(op, read_only_globs))
        except SandloopError as exc:
            raise _fail(exc, _label(op, index, total)) from exc
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
        except SandloopError as exc:
            raise _fail(exc, _label(op, index, total)) from exc
    changes = ws.changes()
    if dry_run:
        return PatchResult(tuple(summaries), tuple(changes), True, _preview(ws, changes))
    if changes:
        await session.commit(changes)
    return PatchResult(tuple(summaries), tuple(changes), False)
