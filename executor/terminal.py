"""Putting text from the model or the sandbox on the operator's terminal, safely.

Everything shown through rich goes through :func:`shown`: control characters become visible
escapes (:func:`sandloop.text.visible`) and rich markup in the text is escaped, so neither a
terminal sequence nor a ``[link=…]`` tag in a command line can act on the terminal or hide part
of what the person is asked to approve.
"""

from __future__ import annotations

from rich.markup import escape

from sandloop.text import visible

__all__ = ["shown", "visible"]


def shown(text: object, *, one_line: bool = False) -> str:
    """``text`` ready for rich's markup: visible control characters, escaped markup."""
    return escape(visible(str(text), one_line=one_line))
