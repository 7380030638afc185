"""Tool kinds: everything the loop knows about one type of call item, in one object.

A :class:`ToolKind` declares the call item type it answers and the output type it answers with,
the SDK model a call is validated against, the tool definitions it adds to ``tools``, the
resources a call takes in turn, a one-line summary, the error output, and the handler. The
dispatcher (:mod:`executor.dispatch`) is generic: it looks the kind up by the item's ``type``
and asks it. Adding an item type is one module in ``executor/handlers/`` and one line in
:mod:`executor.registry`.

Every call is answered, whatever happens: a malformed call (``commands`` missing, a string where
a list belongs) gets the kind's error output naming what is wrong, before anything runs.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from executor.items import Output, ResourceKey
from executor.toolbox import Toolbox

__all__ = ["Answer", "MalformedCall", "ToolKind", "text_outcome"]

CallT = TypeVar("CallT", bound=BaseModel)


class MalformedCall(ValueError):
    """The call item does not match its type's schema; the message says where."""


@dataclass(frozen=True)
class Answer:
    """A handler's output, and what the model must also be told that the output cannot say
    (the dispatcher adds notes to an output's text, or sends them beside it)."""

    output: Output
    notes: tuple[str, ...] = ()


def _field_errors(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or 'item'}: {error['msg']}" for error in exc.errors()
    )


def text_outcome(text: Any) -> tuple[bool, str]:
    """(looks successful, first 100 characters) of a text output."""
    text = text if isinstance(text, str) else json.dumps(text)
    failed = text.startswith(("error", "denied", "internal error", "not enabled", "invalid"))
    return not failed, text[:100]


class ToolKind(abc.ABC, Generic[CallT]):
    """One call item type: how to read it, run it and answer it, for one run's toolbox."""

    #: the ``type`` of the call item, and of the output item that answers it
    call_type: ClassVar[str]
    output_type: ClassVar[str]
    #: the SDK's model of the call item; every call is validated against it before it runs
    model: ClassVar[type[BaseModel]]
    #: the output field that names the call it answers
    answers_by: ClassVar[str] = "call_id"

    def __init__(self, toolbox: Toolbox) -> None:
        self.toolbox = toolbox

    # -- reading a call -------------------------------------------------------------------

    def call_id(self, item: dict[str, Any]) -> str:
        """The correlation key the answer must carry."""
        return str(item.get("call_id") or "")

    def actionable(self, item: dict[str, Any]) -> bool:
        """Does the client run this call? (Server-run variants need no answer.)"""
        return True

    def parse(self, item: dict[str, Any]) -> CallT:
        """The item as the SDK's model, validated; :class:`MalformedCall` says what is wrong."""
        try:
            call = self.model.model_validate(item)
        except ValidationError as exc:
            raise MalformedCall(f"invalid {self.call_type}: {_field_errors(exc)}") from None
        return call  # type: ignore[return-value]  # model is CallT's class

    def summary(self, item: dict[str, Any]) -> str:
        """One line for progress and logs (from the raw item: malformed calls have one too)."""
        return self.call_type

    def parts(self, item: dict[str, Any]) -> list[str]:
        """The separate things one call runs, when it runs several (a shell_call's commands, each
        with its own exit code): progress shows them as a list, one per line, never joined into
        one line they were not. Empty when the summary says it all."""
        return []

    # -- what a call needs -----------------------------------------------------------------

    def tool_params(self) -> list[dict[str, Any]]:
        """The tool definitions this kind adds to ``tools`` (what the toolbox holds decides)."""
        return []

    def unavailable(self, call: CallT) -> str | None:
        """Why this run cannot run the call (no session, no computer …), or None."""
        return None

    def resources(self, call: CallT) -> Sequence[ResourceKey]:
        """Resources the call takes in turn with other calls (FIFO, in call order)."""
        return ()

    def in_background(self, call: CallT) -> bool:
        """Does the call run as a background task, answered in a later request?"""
        return False

    @abc.abstractmethod
    async def handle(self, call: CallT) -> Output | Answer:
        """Run the call and build its output."""

    # -- answering ---------------------------------------------------------------------------

    @abc.abstractmethod
    def error_output(self, item: dict[str, Any], text: str) -> Output:
        """An output of the right type that tells the model what went wrong (from the raw
        item, so a call that does not even parse is answered too)."""

    def with_note(self, output: Output, note: str) -> Output | None:
        """The output with ``note`` added to the text the model reads; None when this output
        type carries no text (the note then goes beside it)."""
        return None

    def outcome(self, output: Output) -> tuple[bool, str]:
        """(looks successful, one-line outcome) for progress and the turn records."""
        return text_outcome(output.get("output"))

    def answers(self, item: dict[str, Any], output: Any) -> bool:
        """Is ``output`` an output of the right type that answers exactly this call?"""
        return (isinstance(output, dict) and output.get("type") == self.output_type
                and output.get(self.answers_by) == self.call_id(item))
