"""Putting text from the model or the sandbox on the operator's terminal, safely.

Everything shown through rich goes through :func:`shown`: control characters become visible
escapes (:func:`sandloop.text.visible`) and rich markup in the text is escaped, so neither a
terminal sequence nor a ``[link=…]`` tag in a command line can act on the terminal or hide part
of what the person is asked to approve.
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.markup import escape

from sandloop.text import visible

__all__ = ["console", "shown", "visible"]


def console() -> Console:
    """The operator's console (stderr): no escape codes at all under ``NO_COLOR`` (colours and
    styles alike) or when stderr is not a terminal, and long lines never wrapped by inserted
    newlines (a one-line error stays one line in a pipe or a log)."""
    plain = bool(os.environ.get("NO_COLOR"))
    return Console(stderr=True, color_system=None if plain else "auto", soft_wrap=True, highlight=False)


def shown(text: object, *, one_line: bool = False) -> str:
    """``text`` ready for rich's markup: visible control characters, escaped markup."""
    return escape(visible(str(text), one_line=one_line))
