"""``sandloop apply-patch``: apply a patch to a directory, like Codex's ``apply_patch``.

::

    sandloop apply-patch [--root DIR] [--dry-run] [PATCHFILE|-]     envelope (or unified) patch
    sandloop apply-patch [--root DIR] [--dry-run] --op OP.json      one API operation

Runs against :class:`sandbox.local.LocalSession` — file operations confined to ``--root``, no
container — with the same all-or-nothing transaction as the loop. No policy file is consulted;
read-only globs (``--read-only``, default ``.git/**``) still apply. Exit 0 on success, 1 with the
message on standard error on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from sandbox.patch import formats, paths, v4a
from sandbox.patch.apply import apply_operations
from sandloop.errors import PatchParseError, SandloopError, describe
from sandloop.files import PatchKind
from sandloop.verdict import Decision, Verdict

__all__ = ["main", "register", "run"]


async def _allow_all(path: str, kind: PatchKind) -> Verdict:
    return Verdict(Decision.ALLOW, "sandloop apply-patch applies patches without a policy file")


def _api_operation(text: str) -> v4a.FileOp:
    # Imported here: the SDK's response types are only needed for --op.
    from openai.types.responses.response_apply_patch_tool_call import Operation

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PatchParseError(f"--op: not JSON: {exc}") from None
    if isinstance(data, dict) and "operation" in data:
        data = data["operation"]  # a whole apply_patch_call item
    kinds = {"create_file", "update_file", "delete_file"}
    if not isinstance(data, dict):
        raise PatchParseError("--op: expected a JSON object with type, path and (to create or update) diff")
    if data.get("type") not in kinds:
        raise PatchParseError(f"--op: type must be one of {', '.join(sorted(kinds))}, "
                              f"not {json.dumps(data.get('type'))}")
    try:
        op = TypeAdapter(Operation).validate_python(data)
    except ValidationError as exc:
        # Only the errors of the branch the type names; one line, no documentation URLs.
        problems = [f"{'.'.join(str(p) for p in err['loc'][1:]) or 'operation'}: {err['msg'].lower()}"
                    for err in exc.errors(include_url=False)
                    if err["loc"] and _branch_type(str(err["loc"][0])) == data["type"]]
        raise PatchParseError(f"--op: {data['type']}: {'; '.join(problems) or 'invalid'}") from None
    return v4a.from_api(op.type, op.path, getattr(op, "diff", None))


def _branch_type(model_name: str) -> str:
    """``OperationCreateFile`` → ``create_file``: the union branch pydantic names in an error."""
    name = model_name.removeprefix("Operation")
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def _read(source: str) -> str:
    """A patch or operation file (``-``: standard input) as text, its newlines untranslated.

    Text mode would turn CRLF and lone CRs into LF, and with them the line endings a unified
    diff spells out; a UTF-8 BOM is dropped (it is never part of a patch).
    """
    data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        name = "standard input" if source == "-" else source
        raise PatchParseError(f"{name} is not valid UTF-8 (byte {exc.start})") from None


async def _apply(args: argparse.Namespace) -> str:
    from sandbox.local import LocalSession  # the host back-end, only needed when running

    ops = [_api_operation(_read(args.op))] if args.op is not None \
        else formats.parse(_read(args.patchfile), args.format)
    session = await LocalSession.create(Path(args.root))
    async with session:
        result = await apply_operations(
            session,
            ops,
            allow=_allow_all,
            read_only_globs=tuple(args.read_only or paths.DEFAULT_READ_ONLY_GLOBS),
            dry_run=args.dry_run,
        )
    return f"{result.text}\n{result.preview}" if result.preview else result.text


def run(args: argparse.Namespace) -> int:
    """Run a parsed ``apply-patch`` command line; returns the exit status."""
    try:
        out = asyncio.run(_apply(args))
    except (SandloopError, OSError) as exc:
        print(describe(exc), file=sys.stderr)
        return 1
    print(out.rstrip("\n"))
    return 0


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--root", default=".", help="directory the paths are relative to")
    parser.add_argument("--dry-run", action="store_true", help="show what would change")
    parser.add_argument(
        "--format",
        choices=("auto", "envelope", "unified"),
        default="auto",
        help="patch format of PATCHFILE (default: detect)",
    )
    parser.add_argument(
        "--read-only",
        action="append",
        metavar="GLOB",
        help="refuse paths matching GLOB (repeatable; default .git/**)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--op", metavar="OP.json", help="one apply_patch API operation (JSON)")
    source.add_argument(
        "patchfile", nargs="?", default="-", metavar="PATCHFILE", help="patch file, or - for stdin"
    )
    parser.set_defaults(func=run)
    return parser


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``apply-patch`` subcommand; it sets ``func`` (args → exit status) as its default."""
    _configure(
        subparsers.add_parser(
            "apply-patch",
            help="apply a patch to a directory (all or nothing)",
            description=__doc__.split("\n\n")[0] if __doc__ else None,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = _configure(argparse.ArgumentParser(prog="sandloop apply-patch"))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
