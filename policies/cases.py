"""A CASES.toml of expected decisions (``sandloop policy test FILE CASES.toml``): its schema,
read with the same file-and-line errors as a policy file."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator

from policies.engine import PolicyEngine
from policies.model import Layer, key_lines
from policies.model import validation_problems as _problems_of
from policies.problems import PolicyLoadError, Problem
from sandloop.verdict import Decision, Verdict

__all__ = ["Case", "CaseFile", "read_cases"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _PatchCase(_Strict):
    """``{type = "update_file", path = "…"}``: spelled as the API's operation (and as
    ``explain --patch`` reads it); ``kind`` is read too."""

    path: str
    type: Literal["create_file", "update_file", "delete_file"] = Field(
        validation_alias=AliasChoices("type", "kind"))


class _McpCase(_Strict):
    server: str
    tool: str


class Case(_Strict):
    """One ``[[case]]`` of a CASES.toml: exactly one subject, and the expected decision."""

    command: str | None = None
    patch: _PatchCase | None = None
    url: str | None = None
    mcp: _McpCase | None = None
    function: str | None = None
    decision: Decision
    rule: str | None = None  # expected rule id, when it matters

    @model_validator(mode="after")
    def _one_subject(self) -> Case:
        given = [self.command, self.patch, self.url, self.mcp, self.function]
        if sum(x is not None for x in given) != 1:
            raise ValueError("a case needs exactly one of command, patch, url, mcp, function")
        return self

    def subject(self) -> str:
        if self.patch is not None:
            return f"patch {self.patch.type} {self.patch.path}"
        if self.mcp is not None:
            return f"mcp {self.mcp.server}/{self.mcp.tool}"
        if self.function is not None:
            return f"function {self.function}"
        return self.command if self.command is not None else f"url {self.url}"

    def run(self, engine: PolicyEngine) -> Verdict:
        if self.patch is not None:
            return engine.patch(self.patch.path, self.patch.type)
        if self.mcp is not None:
            return engine.mcp(self.mcp.server, self.mcp.tool)
        if self.function is not None:
            return engine.function(self.function)
        if self.url is not None:
            return engine.url(self.url)
        return engine.shell(self.command or "")


class CaseFile(_Strict):
    case: list[Case]


def read_cases(path: Path) -> list[Case]:
    text = path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyLoadError([Problem(str(path), None, f"invalid TOML: {exc}")]) from exc
    try:
        return CaseFile.model_validate(data).case
    except ValidationError as exc:
        layer = Layer(name=str(path), path=path, text=text, data=data, lines=key_lines(text))
        raise PolicyLoadError(_problems_of(layer, data, exc)) from exc
