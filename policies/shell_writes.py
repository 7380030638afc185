"""The files a command writes, read from its words, so the ``[files]`` rules decide them like a
patch: ``echo x > .github/workflows/ci.yml`` is a write to that path whatever program echoes.

Redirections are read by the walker (:mod:`policies.shell_parse`); this module knows the
programs whose operands are files they create, change or delete: ``tee``, ``dd of=``, ``cp``,
``mv``, ``install``, ``ln``, ``touch``, ``truncate``, ``rm``, ``unlink``, ``shred``, ``chmod``
and friends, ``sed -i``, ``sort -o``, ``uniq IN OUT``, ``gzip`` and its kin, and the archive
tools and ``patch``, whose targets come from their input and so cannot be known (a
:class:`~policies.shell_words.Dynamic` path). A link is a way to write its target: ``ln -s
.git/config x`` writes ``.git/config`` as far as the rules are concerned.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable

from policies.shell_words import ONE, Dynamic, Word
from sandloop.files import PatchKind

__all__ = ["NOT_FILES", "program_writes"]

#: Paths that are not files in the workspace: writing them changes nothing there.
NOT_FILES = re.compile(r"^(/dev/(null|stdout|stderr|tty|fd/\d+)|/proc/self/fd/\d+|-)$")

Target = tuple[Word, PatchKind, str]
_UNKNOWN = Dynamic(ONE, "<paths named by the input>")


def _operands(argv: tuple[Word, ...], with_value: str = "", long_with_value: frozenset[str] = frozenset()
              ) -> tuple[list[Word], dict[str, Word]]:
    """(operands, option values) of a GNU-style argv: ``with_value`` short options and
    ``long_with_value`` long options take a value; ``--`` ends the options."""
    operands: list[Word] = []
    values: dict[str, Word] = {}
    i, options = 1, True
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not options or isinstance(arg, Dynamic) or arg == "-" or not arg.startswith("-"):
            operands.append(arg)
            continue
        if arg == "--":
            options = False
        elif arg.startswith("--"):
            key, eq, value = arg[2:].partition("=")
            if key in long_with_value:
                values[key] = value if eq else (argv[i] if i < len(argv) else "")
                i += 0 if eq else 1
            else:
                values[key] = value if eq else ""
        else:
            for j, letter in enumerate(arg[1:], start=2):
                if letter in with_value:
                    values[letter] = arg[j:] or (argv[i] if i < len(argv) else "")
                    i += 0 if arg[j:] else 1
                    break
                values[letter] = ""
    return operands, values


def _joined(directory: Word, source: Word) -> Word:
    if isinstance(directory, Dynamic) or isinstance(source, Dynamic):
        return Dynamic(ONE, f"{directory}/…")
    return posixpath.join(directory, posixpath.basename(source.rstrip("/")))


def _copy_like(argv: tuple[Word, ...], *, moves: bool, links: bool) -> list[Target]:
    """cp, mv, install, ln: the destination (and each source's name inside it, as the
    destination may be a directory); a move deletes its sources; a link writes its targets."""
    name = str(argv[0])
    operands, values = _operands(argv, "tSmogZ" if name == "install" else "tS",
                                 frozenset({"target-directory", "suffix", "mode", "owner", "group",
                                            "backup", "reply", "sparse", "context"}))
    if "d" in values and name == "install":
        return []  # install -d makes directories
    directory = values.get("t", values.get("target-directory"))
    if directory is not None:
        sources, dest = operands, directory
    elif name == "ln" and len(operands) == 1:
        sources, dest = operands, "."
    elif len(operands) >= 2:
        sources, dest = operands[:-1], operands[-1]
    else:
        return []
    out: list[Target] = [(dest, "create_file", f"{name} destination")]
    out += [(_joined(dest, s), "create_file", f"{name} destination") for s in sources]
    if moves:
        out += [(s, "delete_file", f"{name} source") for s in sources]
    symbolic = links or any(k in values for k in ("s", "l", "symbolic", "symbolic-link", "link"))
    if symbolic:  # a path to the file is a way to write it
        out += [(s, "update_file", f"{name} link target") for s in sources]
    return out


def _each(kind: PatchKind, with_value: str = "", long_with_value: frozenset[str] = frozenset(),
          skip: int = 0) -> Callable[[tuple[Word, ...]], list[Target]]:
    def targets(argv: tuple[Word, ...]) -> list[Target]:
        operands, values = _operands(argv, with_value, long_with_value)
        # chmod MODE FILES, but chmod --reference=F FILES: then every operand is a target
        first = 0 if "reference" in values else skip
        return [(o, kind, str(argv[0])) for o in operands[first:]]

    return targets


def _dd(argv: tuple[Word, ...]) -> list[Target]:
    out: list[Target] = []
    for arg in argv[1:]:
        if isinstance(arg, Dynamic):
            out.append((Dynamic(ONE, arg.text), "update_file", "dd of="))
        elif arg.startswith("of="):
            out.append((arg[3:], "update_file", "dd of="))
    return out


def _sed(argv: tuple[Word, ...]) -> list[Target]:
    operands, values = _operands(argv, "efl", frozenset({"expression", "file", "line-length"}))
    if not any(k == "i" or k.startswith("i") or k.startswith("in-place") for k in values):
        return []
    has_script = any(k in values for k in ("e", "f", "expression", "file"))
    files = operands if has_script else operands[1:]
    return [(f, "update_file", "sed -i") for f in files]


def _sort(argv: tuple[Word, ...]) -> list[Target]:
    _, values = _operands(argv, "kSTto", frozenset({"output", "key", "buffer-size", "temporary-directory",
                                                     "field-separator", "parallel", "batch-size",
                                                     "compress-program", "files0-from", "random-source"}))
    out = values.get("o", values.get("output"))
    return [(out, "update_file", "sort -o")] if out is not None else []


def _uniq(argv: tuple[Word, ...]) -> list[Target]:
    operands, _ = _operands(argv, "fsw", frozenset({"skip-fields", "skip-chars", "check-chars", "group",
                                                    "all-repeated"}))
    return [(operands[1], "update_file", "uniq OUTPUT")] if len(operands) >= 2 else []


_SUFFIX = {"gzip": ".gz", "xz": ".xz", "bzip2": ".bz2", "zstd": ".zst"}


def _compressor(argv: tuple[Word, ...]) -> list[Target]:
    name = str(argv[0])
    operands, values = _operands(argv, "S", frozenset({"suffix"}))
    if any(k in values for k in ("c", "stdout", "to-stdout", "t", "test", "l", "list")):
        return []
    decompress = name.startswith(("gunzip", "unxz", "bunzip", "unzstd")) or "d" in values \
        or "decompress" in values
    out: list[Target] = []
    for operand in operands:
        if isinstance(operand, Dynamic):
            out.append((operand, "create_file", name))
            continue
        produced = (re.sub(r"\.(gz|xz|bz2|zst|lz|z)$", "", operand) if decompress
                    else operand + _SUFFIX.get(name, ".gz"))
        out.append((produced, "create_file", name))
        if not any(k in values for k in ("k", "keep")):
            out.append((operand, "delete_file", name))
    return out


def _unknowable(*readonly_flags: str) -> Callable[[tuple[Word, ...]], list[Target]]:
    """Archive tools and patch write paths named by their input: unknown, unless only listing."""

    def targets(argv: tuple[Word, ...]) -> list[Target]:
        words = [a for a in argv[1:] if isinstance(a, str)]
        if any(w in readonly_flags for w in words):
            return []
        return [(_UNKNOWN, "create_file", f"{argv[0]} (paths from its input)")]

    return targets


def _tar(argv: tuple[Word, ...]) -> list[Target]:
    first = argv[1] if len(argv) > 1 else ""
    words = [a for a in argv[1:] if isinstance(a, str)]
    old_style = isinstance(first, str) and first and not first.startswith("-")
    letters = first if old_style and isinstance(first, str) else "".join(
        w[1:] for w in words if w.startswith("-") and not w.startswith("--"))
    extracting = "x" in letters or any(w.startswith("--extract") or w == "--get" for w in words)
    if extracting:
        return [(_UNKNOWN, "create_file", "tar extract (paths from the archive)")]
    creating = any(c in letters for c in "cru") or any(w.startswith(("--create", "--append", "--update"))
                                                      for w in words)
    if not creating:
        return []
    _, values = _operands(argv, "fCbgHKLNTVXI", frozenset({"file", "directory"}))
    archive = values.get("f", values.get("file"))
    if old_style and "f" in letters and len(argv) > 2:
        archive = argv[2]
    return [(archive, "create_file", "tar archive")] if archive is not None else []


_GIT_GLOBAL_WITH_VALUE = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path",
                          "--config-env", "--super-prefix"}


def _git(argv: tuple[Word, ...]) -> list[Target]:
    """The work-tree files a git subcommand writes, where its words say: ``apply``/``am`` (paths
    from the diff), ``mv``, ``rm``, and ``checkout``/``restore`` of named paths. (Subcommands that
    rewrite the whole work tree also write ``.git``, which sandboxes mount read-only.)"""
    i, directory = 1, ""
    while i < len(argv) and isinstance(argv[i], str) and str(argv[i]).startswith("-"):
        option = str(argv[i])
        key = option.split("=", 1)[0]
        if key in ("--work-tree", "--git-dir"):
            return [(_UNKNOWN, "create_file", f"git {key} (a work tree chosen at run time)")]
        if key in _GIT_GLOBAL_WITH_VALUE and "=" not in option:
            value = argv[i + 1] if i + 1 < len(argv) else ""
            if key == "-C":
                if isinstance(value, Dynamic):
                    return [(_UNKNOWN, "create_file", "git -C (a directory chosen at run time)")]
                directory = posixpath.join(directory, value)
            i += 2
            continue
        i += 1
    if i >= len(argv) or isinstance(argv[i], Dynamic):
        return [] if i >= len(argv) else [(_UNKNOWN, "create_file", "git (a subcommand chosen at run time)")]
    command, rest = str(argv[i]), argv[i:]
    words = {w for w in rest if isinstance(w, str)}
    targets: list[Target]
    if command in ("apply", "am"):
        listing = {"--check", "--stat", "--numstat", "--summary"}
        only_index = command == "apply" and "--cached" in words
        writes = not (words & listing or only_index)
        targets = [(_UNKNOWN, "create_file", f"git {command} (paths from the diff)")] if writes else []
    elif command == "mv":
        targets = _copy_like(("mv", *rest[1:]), moves=True, links=False)
    elif command == "rm":
        targets = [] if "--cached" in words else [(o, "delete_file", "git rm") for o in _operands(rest)[0]]
    elif command in ("checkout", "restore"):
        paths = list(rest[rest.index("--") + 1:]) if "--" in rest else (
            _operands(rest, "s", frozenset({"source", "pathspec-from-file"}))[0] if command == "restore" else [])
        if command == "restore" and "--staged" in words and "--worktree" not in words and "-W" not in words:
            paths = []
        targets = [(p, "update_file", f"git {command}") for p in paths]
    else:
        return []
    if not directory:
        return targets
    return [(t if isinstance(t, Dynamic) else posixpath.join(directory, t), kind, how) for t, kind, how in targets]


_PROGRAMS: dict[str, Callable[[tuple[Word, ...]], list[Target]]] = {
    "git": _git,
    "mkdir": _each("create_file", "m", frozenset({"mode", "context"})),
    "rmdir": _each("delete_file"),
    "tee": _each("create_file", "", frozenset({"output-error"})),
    "dd": _dd,
    "cp": lambda argv: _copy_like(argv, moves=False, links=False),
    "mv": lambda argv: _copy_like(argv, moves=True, links=False),
    "install": lambda argv: _copy_like(argv, moves=False, links=False),
    "ln": lambda argv: _copy_like(argv, moves=False, links=True),
    "link": lambda argv: _copy_like(argv, moves=False, links=True),
    "touch": _each("create_file", "dtr", frozenset({"date", "reference", "time"})),
    "truncate": _each("update_file", "sr", frozenset({"size", "reference"})),
    "rm": _each("delete_file"),
    "unlink": _each("delete_file"),
    "shred": _each("delete_file", "nsx", frozenset({"iterations", "size", "random-source"})),
    "chmod": _each("update_file", "", frozenset({"reference"}), skip=1),
    "chown": _each("update_file", "", frozenset({"reference", "from"}), skip=1),
    "chgrp": _each("update_file", "", frozenset({"reference"}), skip=1),
    "sed": _sed,
    "gsed": _sed,
    "sort": _sort,
    "uniq": _uniq,
    "gzip": _compressor, "gunzip": _compressor, "xz": _compressor, "unxz": _compressor,
    "bzip2": _compressor, "bunzip2": _compressor, "zstd": _compressor, "unzstd": _compressor,
    "tar": _tar,
    "unzip": _unknowable("-l", "-t", "-p", "-Z", "-v"),
    "patch": _unknowable("--dry-run"),
    "cpio": _unknowable("-o", "--create", "-t", "--list"),
    "rsync": _unknowable("--dry-run", "-n", "--list-only"),
}


def program_writes(argv: tuple[Word, ...]) -> list[Target]:
    """(path, kind, how) for every file the program named by ``argv[0]`` writes, as far as its
    words tell; paths that are not files (``/dev/null``) left out."""
    name = argv[0] if argv else None
    handler = _PROGRAMS.get(name) if isinstance(name, str) else None
    if handler is None:
        return []
    return [(path, kind, how) for path, kind, how in handler(argv)
            if isinstance(path, Dynamic) or (path and not NOT_FILES.match(path))]
