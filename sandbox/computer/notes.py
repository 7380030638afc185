"""What the model reads beside a screenshot when a batch did not go as asked: one wording for
every placement (an output can carry only the screenshot; the notes go beside it)."""

from __future__ import annotations

__all__ = ["died", "failed", "first_line", "not_run", "restarted"]


def first_line(exc: BaseException) -> str:
    """An error's first line, as a note quotes it (a driver's message may run to a stack)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _rest(index: int, total: int) -> str:
    return f"; actions {index + 1}..{total} were not run either" if index < total else ""


def not_run(index: int, total: int, why: str) -> str:
    """Action ``index`` (1-based) of ``total`` cannot run as given, so neither do the rest."""
    return f"action {index} not run: {why}" + _rest(index, total)


def failed(index: int, total: int, why: str) -> str:
    """Action ``index`` was tried and failed; the rest were not run."""
    return f"action {index} failed: {why}" + _rest(index, total)


def died(what: str, index: int) -> str:
    """The placement itself (``what``: "browser", "desktop") died under action ``index``."""
    return f"the {what} died during action {index}; the remaining actions were not run"


def restarted(what: str, why: str, where: str, lost: str) -> str:
    """The placement was started afresh: ``where`` it is now, and what state went with the old one."""
    return f"the {what} {why}; it was restarted {where} ({lost} are gone)"
