"""The part of a policy that decides, as plain data: what :class:`policies.engine.Decider` reads.

A loaded policy (:mod:`policies.model`, validated by pydantic) is boiled down to this view once;
:mod:`policies.snapshot` stores the same view on the host, so ``sandloop policy explain`` can
decide from it without loading the schema's models. Both come through :meth:`PolicyView.from_data`,
from the same JSON-shaped data, so the two cannot read a policy differently.

Where each deciding key is written (``file:line``, shown with every verdict) is kept as the layer
it comes from and its line: a layer's name (:func:`policies.paths.display`) depends on the folder
the command runs in, so names are given when the view is built, not stored.

Standard library and the shared vocabulary only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from sandloop.verdict import Decision

__all__ = ["DECIDING", "KeyPath", "PolicyView", "RuleView", "Source", "decided_paths"]

KeyPath = tuple[str | int, ...]
#: Where a key is written: (index of the layer, bases first; its line, when known).
Source = tuple[int, int | None]

#: The keys of a policy that decisions read (a pydantic ``include``): everything else — budgets,
#: the environment, the back-end, timeouts — shapes a run, not an answer.
DECIDING: dict[str, Any] = {
    "unattended": True,
    "shell": {"default": True, "rules": True},
    "files": True,
    "browser": {"allow_domains": True, "block_domains": True, "default": True},
    "mcp": True,
    "functions": True,
}


class RuleView(NamedTuple):
    id: str
    pattern: list[str | list[str]]
    decision: Decision
    justification: str
    match: list[str]
    not_match: list[str]


class ShellView(NamedTuple):
    default: Decision
    rules: tuple[RuleView, ...]


class FilesView(NamedTuple):
    writable: list[str]
    read_only: list[str]
    default: Decision
    max_patch_bytes: int
    allow_create: bool
    allow_delete: bool


class BrowserView(NamedTuple):
    allow_domains: list[str]
    block_domains: list[str]
    default: Decision


class McpServerView(NamedTuple):
    default: Decision | None
    tools: dict[str, Decision]


class McpView(NamedTuple):
    default: Decision
    servers: dict[str, McpServerView]


class FunctionsView(NamedTuple):
    default: Decision
    tools: dict[str, Decision]


def _decisions(data: Mapping[str, str]) -> dict[str, Decision]:
    return {name: Decision(value) for name, value in data.items()}


# NamedTuples, not dataclasses: the same frozen records, and several times cheaper to define
# (this module is imported by every ``policy explain``).
class PolicyView(NamedTuple):
    """The deciding keys of one effective policy, and where each is written."""

    unattended: bool
    shell: ShellView
    files: FilesView
    browser: BrowserView
    mcp: McpView
    functions: FunctionsView
    layers: tuple[str, ...]  # how messages name each layer file, bases first
    sources: dict[KeyPath, Source]

    @classmethod
    def from_data(cls, data: Mapping[str, Any], layers: Sequence[str],
                  sources: Mapping[KeyPath, Source]) -> PolicyView:
        """The view of ``data`` (the policy's :data:`DECIDING` keys, as JSON reads them)."""
        shell, files, browser = data["shell"], data["files"], data["browser"]
        mcp, functions = data["mcp"], data["functions"]
        return cls(
            unattended=bool(data["unattended"]),
            shell=ShellView(Decision(shell["default"]), tuple(
                RuleView(r["id"], list(r["pattern"]), Decision(r["decision"]), r["justification"],
                         list(r.get("match", [])), list(r.get("not_match", [])))
                for r in shell["rules"])),
            files=FilesView(list(files["writable"]), list(files["read_only"]), Decision(files["default"]),
                            int(files["max_patch_bytes"]), bool(files["allow_create"]),
                            bool(files["allow_delete"])),
            browser=BrowserView(list(browser["allow_domains"]), list(browser["block_domains"]),
                                Decision(browser["default"])),
            mcp=McpView(Decision(mcp["default"]), {
                label: McpServerView(None if s["default"] is None else Decision(s["default"]),
                                     _decisions(s["tools"]))
                for label, s in mcp["servers"].items()}),
            functions=FunctionsView(Decision(functions["default"]), _decisions(functions["tools"])),
            layers=tuple(layers),
            sources=dict(sources),
        )

    def to_data(self) -> dict[str, Any]:
        """The data :meth:`from_data` reads back (JSON-ready; decisions are strings)."""
        data: dict[str, Any] = _plain(self)
        del data["layers"], data["sources"]
        return data

    def where(self, path: KeyPath) -> str:
        """"file:line" of a deciding key; "built-in default" when no file sets it."""
        found = self.sources.get(path)
        if found is None:
            return "built-in default"
        layer, line = found
        return f"{self.layers[layer]}:{line}" if line else self.layers[layer]


def _plain(value: Any) -> Any:
    """Records as dicts, tuples as lists, all the way down (decisions stay strings)."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {name: _plain(item) for name, item in zip(value._fields, value, strict=True)}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def decided_paths(view: PolicyView) -> Iterator[KeyPath]:
    """Every key a decision names as its source (:meth:`PolicyView.where`): the sections and
    defaults, each rule, each glob and domain entry, each listed MCP server, tool and function."""
    yield ("files",)
    for key in ("shell", "files", "browser", "mcp", "functions"):
        yield (key, "default")
    for n in range(len(view.shell.rules)):
        yield ("shell", "rules", n)
    yield ("files", "writable")
    for key in ("max_patch_bytes", "allow_create", "allow_delete"):
        yield ("files", key)
    for key, entries in (("writable", view.files.writable), ("read_only", view.files.read_only)):
        for n in range(len(entries)):
            yield ("files", key, n)
    for key, entries in (("allow_domains", view.browser.allow_domains),
                         ("block_domains", view.browser.block_domains)):
        for n in range(len(entries)):
            yield ("browser", key, n)
    for label, server in view.mcp.servers.items():
        yield ("mcp", "servers", label, "default")
        for tool in server.tools:
            yield ("mcp", "servers", label, "tools", tool)
    for name in view.functions.tools:
        yield ("functions", "tools", name)
