"""Where policy files are: the presets shipped with sandloop, what a policy argument names, and
how messages name a file.

Standard library only: ``sandloop policy explain`` finds its policy file (and the snapshot of
it) before it knows whether the schema's models are needed at all.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["PRESETS_DIR", "display", "names_preset", "preset_file", "preset_names"]

PRESETS_DIR = Path(__file__).parent / "presets"
_PRESET_NAME = re.compile(r"[A-Za-z0-9_-]+")


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))


def preset_file(name: str) -> Path | None:
    """The preset's file, or None when there is no preset of that name."""
    path = PRESETS_DIR / f"{name}.toml"
    return path if _PRESET_NAME.fullmatch(name) and path.is_file() else None


def names_preset(spec: str | Path) -> bool:
    """Does a policy argument name a preset (``strict``) rather than a file? A bare word is a
    preset unless a file of that name is in the current folder."""
    return isinstance(spec, str) and _PRESET_NAME.fullmatch(spec) is not None and not Path(spec).exists()


def display(path: Path) -> str:
    """How messages and verdicts name a policy file: a preset relative to the project
    (``policies/presets/default.toml``), another file relative to the current folder when it
    is under it, else in full."""
    try:
        return str(path.relative_to(PRESETS_DIR.parent.parent))
    except ValueError:
        pass
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
