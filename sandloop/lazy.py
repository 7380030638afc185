"""Names a package re-exports, imported when first used (PEP 562).

A package ``__init__`` that imports its public names eagerly makes every ``import pkg.anything``
pay for all of them: ``executor``'s pulled the whole ``openai`` type tree into ``sandloop
--version``. With :func:`exports` the ``__init__`` says where each name lives; the module is
imported on the first ``pkg.Name`` (or ``from pkg import Name``) and the value is kept in the
package's namespace, so later lookups cost nothing. Type checkers read the same names from an
``if TYPE_CHECKING:`` block of plain imports next to ``__all__``, so nothing is lost to them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["exports"]


def exports(package: str, where: Mapping[str, Iterable[str]],
            ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, which re-exports each module's names in
    ``where`` (module name → the names taken from it)."""
    home = {name: module for module, names in where.items() for name in names}
    namespace = importlib.import_module(package).__dict__  # the package being initialised

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # found once; the next lookup never reaches __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *home})

    return __getattr__, __dir__
