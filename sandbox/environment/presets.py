"""``[environment] preset``: a setup written once for a kind of project.

A preset adds to the section, never replaces it: its setup commands run first (the section's own
``setup`` after them, for what the project needs beyond), its files key the cache with the
section's ``cache_key``, and the registries it needs are reachable with the section's.

* ``python`` — a venv in ``/opt/env`` with the project installed editable and everything it
  declares for its tests (extras, dependency groups, requirement files:
  :mod:`.python_setup`, which runs inside the setup sandbox), and pytest; pip's index reachable.

What a preset runs that is not a plain command (the python preset's discovery) is a program of
sandloop's, mounted read-only into the setup container; its digest is part of the key, so a
changed program sets the environment up again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from .. import bundle
from . import python_setup
from .spec import PREFIX, EnvironmentSpec

__all__ = ["PRESETS", "PYTHON_SETUP", "Preset", "expand", "key_part", "programs"]


@dataclass(frozen=True)
class Preset:
    setup: tuple[str, ...]
    cache_key: tuple[str, ...]
    setup_registries: tuple[str, ...]
    #: where in the setup container → the modules of the zip application mounted there
    programs: Mapping[str, tuple[str, ...]]


PYTHON_SETUP = "/opt/sandloop/python-setup.pyz"

PRESETS: Mapping[str, Preset] = {
    "python": Preset(
        setup=(f"python3 -m venv {PREFIX}", f"{PREFIX}/bin/python -I {PYTHON_SETUP}"),
        cache_key=python_setup.KEY_FILES,
        setup_registries=("pip",),
        programs={PYTHON_SETUP: ("sandbox.environment.python_setup",)},
    ),
}


def _preset(spec: EnvironmentSpec) -> Preset | None:
    return None if spec.preset is None else PRESETS[spec.preset]


def expand(spec: EnvironmentSpec) -> EnvironmentSpec:
    """``spec`` with its preset's setup first, its files keyed and its registries reachable
    (unchanged without a preset). Called once, where a preparation starts."""
    preset = _preset(spec)
    if preset is None:
        return spec
    return replace(spec, setup=(*preset.setup, *spec.setup),
                   cache_key=tuple(dict.fromkeys((*preset.cache_key, *spec.cache_key))),
                   setup_registries=tuple(dict.fromkeys((*preset.setup_registries, *spec.setup_registries))))


def _archive(modules: tuple[str, ...]) -> bytes:
    # From sources only: the same bytes (and key) whatever Python builds it.
    return bundle.zipapp(modules)


def key_part(spec: EnvironmentSpec) -> dict[str, str]:
    """What of the preset the key holds: its name and its programs' digests."""
    preset = _preset(spec)
    if preset is None:
        return {}
    return {"name": str(spec.preset), **{where: hashlib.sha256(_archive(modules)).hexdigest()
                                         for where, modules in preset.programs.items()}}


def programs(spec: EnvironmentSpec, outside: Iterable[Path]) -> dict[str, Path]:
    """The preset's programs installed on this host (outside every sandbox-writable path), by
    where the setup container finds them."""
    preset = _preset(spec)
    if preset is None:
        return {}
    return {where: bundle.install(_archive(modules), Path(where).stem, ".pyz", outside=outside)
            for where, modules in preset.programs.items()}
