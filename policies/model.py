"""The policy file format (TOML, ``version = 1``): schema, layering on presets, and load errors.

A policy file may ``extends = ["default", "./team.toml"]``: preset names (``policies/presets/``)
or paths relative to the extending file. Layers apply in order, the file itself last:

* tables merge key by key, and a key set in a later layer replaces the inherited value (lists are
  replaced whole, never concatenated, so ``writable = []`` really means nothing is writable);
* ``[[shell.rules]]`` are the exception: a later layer's rules are checked *before* the inherited
  ones (first match wins), and a rule with an inherited ``id`` replaces that rule.

Shell rule patterns (``pattern = ["git", ["push", "pull"], "*", "**"]``) match an argv
element by element, as a *prefix* (the argv may go on after the pattern):

* ``"git"`` — exactly this word; the first element is compared with the program's base name
  (``/usr/bin/git`` is ``git``), so it may not contain ``/``;
* ``["push", "pull"]`` — any one of these words;
* ``"*"`` — any one word (it must be present);
* ``"**"`` — any number of words, none included. Trailing, it only says "and anything after"
  (a pattern is a prefix anyway); in the middle it lets a word be found anywhere:
  ``["find", "**", "-delete"]``.

* any other word with ``*``, ``?`` or ``[…]`` in it is a *word glob* with :func:`fnmatch.fnmatchcase`
  semantics, matched against one whole word: ``"--compress-program=*"`` is that option with any
  value, ``"-O*"`` any word starting ``-O``, ``"--to-com*"`` catches abbreviations. ``*`` in a
  word glob matches any characters, ``/`` included; write ``[*]`` for a literal star. A word glob
  may be one of several alternatives (``["-x", "--exec=*"]``) and may name the program
  (``"python3.*"``). A word known only at run time may match a glob, so it is decided as
  strictly as if it did; it is never *certainly* matched by one.

Host lists (``allow_domains``, ``block_domains``, ``[shell] network``) take host names,
``*.suffix``, ``*`` and IP literals, each optionally with ``:port``; they are parsed and matched
by :mod:`sandloop.matching`, the one matcher the engine, the browser and the egress proxy share.
An IP literal (any form Chromium reads: dotted, integer, hex, octal, IPv6) or a loopback name is
reached only through an entry naming exactly it: ``*`` and ``*.suffix`` never match one.

Every error names the file and line: tomllib reports syntax errors with a position, and for
schema errors the loader finds the line of the offending key itself (:func:`key_lines`).
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from policies.paths import PRESETS_DIR as PRESETS_DIR  # re-exported: where the presets are
from policies.paths import display as _display
from policies.paths import preset_file, preset_names
from policies.problems import PolicyLoadError, Problem
from sandloop.matching import host_entry
from sandloop.verdict import Decision

__all__ = [
    "BackendSection",
    "BrowserSection",
    "BudgetSection",
    "ComputerSection",
    "EnvironmentSection",
    "FilesSection",
    "FunctionsSection",
    "Layer",
    "LoadedPolicy",
    "McpSection",
    "McpServer",
    "Policy",
    "PolicyLoadError",
    "Problem",
    "SecretEntry",
    "SessionSection",
    "ShellResources",
    "ShellRule",
    "ShellSection",
    "json_schema",
    "key_lines",
    "load",
    "preset_names",
    "preset_path",
    "validation_problems",
]

_RULE_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _domains(value: list[str]) -> list[str]:
    """Each entry parsed (:func:`sandloop.matching.host_entry`) and kept in its normal form."""
    return [str(host_entry(entry)) for entry in value]


PatternElement = str | list[str]


class ShellRule(_Section):
    """One ``[[shell.rules]]`` entry. The first rule whose pattern matches decides."""

    id: Annotated[str, Field(pattern=_RULE_ID, description="stable name, shown in logs")]
    pattern: Annotated[
        list[PatternElement],
        Field(
            min_length=1,
            description='argv prefix, element by element: a word, ["alternatives"], "*" (one '
            'word), "**" (any number of words), or a word glob with fnmatch semantics '
            '("--compress-program=*", "-O*"; [*] is a literal star). The first element is the '
            "program's base name.",
        ),
    ]
    decision: Decision
    justification: Annotated[str, Field(min_length=1, description="why; the model sees it")]
    match: list[str] = Field(default_factory=list, description="command lines the rule matches")
    not_match: list[str] = Field(default_factory=list, description="lines it must not match")

    @field_validator("pattern", mode="before")
    @classmethod
    def _check_pattern(cls, value: Any) -> Any:
        if not isinstance(value, list) or not value:
            raise ValueError("pattern must be a non-empty list")
        for n, element in enumerate(value):
            alternatives = element if isinstance(element, list) else [element]
            if not alternatives or not all(isinstance(a, str) and a for a in alternatives):
                raise ValueError(
                    f"pattern element {n} must be a non-empty string or a non-empty list of them"
                )
            if isinstance(element, list) and ("*" in element or "**" in element):
                raise ValueError(f"pattern element {n}: '*' and '**' cannot be alternatives")
        first = value[0] if isinstance(value[0], list) else [value[0]]
        if any("/" in a for a in first):
            raise ValueError(
                "the program name is matched by its base name: write 'rm', not '/bin/rm'"
            )
        return value


class ShellResources(_Section):
    memory: Annotated[str, Field(pattern=r"^\d+[bkmg]?$", description="docker format: 2g, 512m")] = "2g"
    cpus: Annotated[float, Field(gt=0)] = 2.0
    pids: Annotated[int, Field(gt=0)] = 512


class ShellSection(_Section):
    default: Decision = Field(default=Decision.PROMPT, description="for commands no rule matches")
    rules: list[ShellRule] = Field(default_factory=list)
    default_timeout_ms: Annotated[int, Field(gt=0)] = 60_000
    max_timeout_ms: Annotated[int, Field(gt=0)] = 600_000
    output_cap_bytes: Annotated[int, Field(gt=0)] = 1_048_576
    env: dict[str, str] = Field(default_factory=dict, description="variables passed in")
    network: Literal["none"] | list[str] = Field(
        default="none", description='"none", or the domains commands may reach'
    )
    resources: ShellResources = Field(default_factory=ShellResources)
    runtime: Literal["runc", "runsc"] = "runc"

    @field_validator("network", mode="before")
    @classmethod
    def _check_network(cls, value: Any) -> Any:
        if value == "none":
            return value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError('network must be "none" or a list of domains')
        return _domains(value)

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    @model_validator(mode="after")
    def _unique_ids(self) -> ShellSection:
        seen: set[str] = set()
        for rule in self.rules:
            if rule.id in seen:
                raise ValueError(f"rule id {rule.id!r} is used twice")
            seen.add(rule.id)
        return self


class FilesSection(_Section):
    writable: list[str] = Field(default_factory=list, description="workspace globs patches may touch")
    read_only: list[str] = Field(default_factory=lambda: [".git/**"], description="win over writable")
    default: Decision = Field(default=Decision.DENY, description="for paths not matched by writable")
    max_patch_bytes: Annotated[int, Field(gt=0)] = 1_048_576
    allow_create: bool = True
    allow_delete: bool = False


class BrowserSection(_Section):
    allow_domains: list[str] = Field(
        default_factory=list,
        description="host, *.suffix, * or an IP address; an IP literal (any form: 0x7f000001, "
        "2130706433, [::ffff:127.0.0.1]…) or localhost / *.localhost is allowed only when listed "
        "exactly: * and *.suffix never match them",
    )
    block_domains: list[str] = Field(default_factory=list, description="checked before allow")
    default: Decision = Field(default=Decision.DENY, description="for hosts not in allow_domains")
    redact_selectors: list[str] = Field(default_factory=lambda: ["input[type=password]"])
    safety_checks: Literal["acknowledge", "refuse", "ask"] = "ask"
    downloads: bool = False

    @field_validator("allow_domains", "block_domains")
    @classmethod
    def _check_domains(cls, value: list[str]) -> list[str]:
        return _domains(value)


class ComputerSection(_Section):
    environment: Literal["browser", "desktop"] = Field(
        default="browser", description='what computer_call drives: "browser" (Chromium\'s page) or "desktop" '
        "(a whole Linux desktop in a container; its network is [shell] network's allow-list)")
    settle_ms: Annotated[int, Field(gt=0, le=30_000)] = Field(
        default=2000, description="desktop: the longest a screenshot waits for the screen to stop changing")
    screen_width: Annotated[int, Field(ge=320, le=3840)] = 1280
    screen_height: Annotated[int, Field(ge=240, le=2160)] = 800


class McpServer(_Section):
    default: Decision | None = Field(default=None, description="for this server's unlisted tools")
    tools: dict[str, Decision] = Field(default_factory=dict)


class McpSection(_Section):
    default: Decision = Decision.PROMPT
    servers: dict[str, McpServer] = Field(default_factory=dict)


class FunctionsSection(_Section):
    default: Decision = Decision.ALLOW
    tools: dict[str, Decision] = Field(default_factory=dict, description="per function name")


class BudgetSection(_Section):
    max_turns: Annotated[int, Field(gt=0)] | None = 50
    max_tokens: Annotated[int, Field(gt=0)] | None = None
    max_wall_s: Annotated[float, Field(gt=0)] | None = 1800.0
    max_tool_calls: Annotated[int, Field(gt=0)] | None = 500


class SessionSection(_Section):
    """``[session]``: whether a session's state is snapshotted, so that a run can resume it."""

    snapshot: Literal["off", "on_stop", "every_turn"] = Field(
        default="off", description="snapshot the session (its $HOME, its root when writable, the "
        "conversation) on a clean stop, or also at the end of every turn; `sandloop snapshot RUN` works "
        "whatever this says")
    writable_root: bool = Field(
        default=False, description="the root file system stays writable, and a snapshot commits it to an image "
        "(packages installed outside $HOME survive a resume); read-only otherwise")
    snapshot_tmp: bool = Field(
        default=False, description="a snapshot keeps all of /tmp, not only $HOME (/tmp/home)")


class BackendSection(_Section):
    """``[backend]``: which back-end runs sessions, and each back-end's own options.

    ``type`` names a back-end (``docker``, ``kubernetes``); a table named after a back-end
    (``[backend.kubernetes]``) holds its options. This module does not know the back-ends: each
    one validates its own table when a session starts (errors name this file and line), so a
    policy can carry options for several and ``sandloop run --backend`` picks one.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    type: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$", description="the back-end that runs "
                               "sessions: docker or kubernetes")] = "docker"
    __pydantic_extra__: dict[str, dict[str, Any]] = Field(init=False)  # [backend.NAME] tables

    def options(self, name: str) -> dict[str, Any]:
        """The options table of back-end ``name`` (empty when the policy has none)."""
        return dict((self.__pydantic_extra__ or {}).get(name, {}))


_PACKAGE = r"^[A-Za-z0-9][A-Za-z0-9+._:=~-]*$"


def _relative_path(value: str, what: str) -> str:
    """A workspace-relative path or glob: no absolute paths, no ``..``."""
    parts = value.replace("\\", "/").split("/")
    if not value or value.startswith("/") or ".." in parts:
        raise ValueError(f"{what} {value!r} must be relative to the workspace, without '..'")
    return value


class EnvironmentSection(_Section):
    """What the sandbox is built from and set up with, before the agent starts.

    Defined by the operator in the policy file (never read from the workspace). ``setup`` runs
    once per cache key, in the same hardened sandbox as the agent, with the checkout mounted and
    the network of ``setup_network`` / ``setup_registries`` only; the result is committed to a
    cached image, which later sessions with the same key start from without running setup."""

    image: str | None = Field(default=None, description="the image to start from (default: sandloop's shell image)")
    preset: Literal["python"] | None = Field(
        default=None, description="a setup written for a kind of project, run before `setup` (with its files added "
        "to cache_key and its registry to setup_registries). python: a venv in /opt/env with the project "
        "installed editable and what it declares for its tests (extras and dependency groups named test, tests, "
        "testing or dev, the usual requirement files) and pytest, found inside the setup sandbox")
    dockerfile: str | None = Field(
        default=None, description="a Dockerfile to build the image from, relative to this policy file "
        "(RUN steps build without network: installs belong in setup)")
    context: str | None = Field(default=None, description="the Dockerfile's build context, relative to this "
                                "policy file (default: the Dockerfile's folder)")
    packages: list[str] = Field(
        default_factory=list, description="system packages installed first through the image's package "
        "manager (apt, apk, dnf), as root with every capability dropped; the image's own package sources "
        "are reachable for this step")
    setup: list[str] = Field(
        default_factory=list, description="commands run once per cache key, in order (bash -e -o pipefail), "
        "as the workspace owner in /workspace; /opt/env is theirs to fill and comes first on PATH")
    setup_network: list[str] = Field(
        default_factory=list, description="hosts setup may reach through the egress proxy (host, *.suffix, "
        "host:port); the agent phase keeps [shell] network")
    setup_registries: list[Literal["pip", "npm", "apt", "apk", "dnf"]] = Field(
        default_factory=list, description="also reach the registries these clients use: pip and npm as "
        "configured on this host (their index URLs are passed to setup), apt/apk/dnf as the image's sources")
    cache_key: list[str] = Field(
        default_factory=list, description="workspace globs whose contents key the cached environment "
        "(lockfiles, pyproject.toml, package.json …), with the image, packages, setup and network")
    cache_paths: list[str] = Field(
        default_factory=list, description="workspace paths setup creates (node_modules …): kept in the cached "
        "environment and put back into a checkout that lacks them")
    trust_host_ca: bool = Field(
        default=False, description="mount this host's CA bundle read-only and point SSL_CERT_FILE, "
        "REQUESTS_CA_BUNDLE, PIP_CERT, CURL_CA_BUNDLE, GIT_SSL_CAINFO, NODE_EXTRA_CA_CERTS and "
        "npm_config_cafile at it, in setup and in the agent phase (networks that intercept TLS)")
    setup_timeout_s: Annotated[int, Field(gt=0, description="the whole setup's time limit")] = 1800

    @field_validator("setup_network", mode="before")
    @classmethod
    def _check_network(cls, value: Any) -> Any:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError("setup_network must be a list of hosts")
        return _domains(value)

    @field_validator("packages")
    @classmethod
    def _check_packages(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.match(_PACKAGE, name):
                raise ValueError(f"{name!r} is not a package name")
        return value

    @field_validator("setup")
    @classmethod
    def _check_setup(cls, value: list[str]) -> list[str]:
        if any(not command.strip() for command in value):
            raise ValueError("a setup command is empty")
        return value

    @field_validator("cache_key", "cache_paths")
    @classmethod
    def _check_relative(cls, value: list[str]) -> list[str]:
        return [_relative_path(item, "path") for item in value]

    @model_validator(mode="after")
    def _one_source(self) -> EnvironmentSection:
        if self.image is not None and self.dockerfile is not None:
            raise ValueError("give image or dockerfile, not both")
        if self.context is not None and self.dockerfile is None:
            raise ValueError("context is the dockerfile's build context: give dockerfile too")
        if self.image is not None and not self.image.strip():
            raise ValueError("image is empty")
        return self


class SecretEntry(_Section):
    """One ``[secrets.NAME]`` entry: a credential the egress proxy adds to HTTPS requests to one
    host, read on the host at session start. The policy names where the value is, never the
    value: ``env`` (a variable of sandloop's own environment) or ``file`` (a path on the host)."""

    host: str = Field(description="the exact host name (no wildcard) the secret is sent to")
    port: Annotated[int, Field(gt=0, lt=65536)] = 443
    env: str | None = Field(default=None, description="the host environment variable holding the value")
    file: str | None = Field(default=None, description="a host file holding the value (one trailing "
                             "newline dropped)")
    header: str = Field(default="Authorization", description="the request header it is sent in")
    template: str = Field(default="Bearer {value}", description="the header's value; {value} is the secret")
    basic: str | None = Field(default=None, description="send HTTP basic auth with this user name and "
                              "the secret as password (instead of header/template)")
    private: bool = Field(default=False, description="the host is an internal service: its name may resolve "
                          "to a private address (never loopback or link-local), for this host only")

    @field_validator("host")
    @classmethod
    def _check_host(cls, value: str) -> str:
        entry = host_entry(value)
        if entry.port is not None or entry.wildcard:
            raise ValueError(f"host {value!r} must be one exact host name (the port goes in `port`)")
        return entry.host

    @field_validator("env")
    @classmethod
    def _check_env_name(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @field_validator("header")
    @classmethod
    def _check_header(cls, value: str) -> str:
        if not re.match(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", value):
            raise ValueError(f"{value!r} is not a header name")
        if value.lower() in {"host", "content-length", "transfer-encoding", "connection"}:
            raise ValueError(f"{value!r} frames the request; a secret cannot be sent in it")
        return value

    @field_validator("template")
    @classmethod
    def _check_template(cls, value: str) -> str:
        if value.count("{value}") != 1 or value.replace("{value}", "").count("{") \
                or value.replace("{value}", "").count("}"):
            raise ValueError("template must contain {value} exactly once and no other braces")
        if any(c in value for c in "\r\n\0"):
            raise ValueError("template may not contain line breaks")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> SecretEntry:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env or file (where the value is; never the value)")
        if self.file is not None and not self.file.startswith("/"):
            raise ValueError(f"file {self.file!r} must be an absolute path on this host")
        if self.basic is not None and (":" in self.basic or any(c in self.basic for c in "\r\n")):
            raise ValueError("basic is a user name: no ':' and no line breaks")
        if self.basic is not None and self.model_fields_set & {"header", "template"}:
            raise ValueError("basic sends Authorization: Basic …; give basic or header/template, not both")
        return self


class Policy(_Section):
    """A whole policy file (or the effective policy after layering)."""

    version: Literal[1]
    extends: list[str] = Field(default_factory=list, description="preset names or relative paths")
    description: str = ""
    unattended: bool = Field(default=False, description="no human to ask: every prompt becomes deny")
    shell: ShellSection = Field(default_factory=ShellSection)
    files: FilesSection = Field(default_factory=FilesSection)
    browser: BrowserSection = Field(default_factory=BrowserSection)
    computer: ComputerSection = Field(default_factory=ComputerSection)
    mcp: McpSection = Field(default_factory=McpSection)
    functions: FunctionsSection = Field(default_factory=FunctionsSection)
    budget: BudgetSection = Field(default_factory=BudgetSection)
    session: SessionSection = Field(default_factory=SessionSection)
    backend: BackendSection = Field(default_factory=BackendSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    secrets: dict[Annotated[str, Field(pattern=_RULE_ID)], SecretEntry] = Field(
        default_factory=dict, description="credentials the egress proxy adds to HTTPS requests to one "
        "host each; the sandbox never holds them")


def json_schema() -> dict[str, Any]:
    """JSON Schema of one policy file, for editors (taplo, VS Code Even Better TOML)."""
    schema = Policy.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "sandloop policy"
    return schema


# --- locating keys -----------------------------------------------------------------------------

KeyPath = tuple[str | int, ...]


def _split_key(key: str) -> list[str]:
    """`a."b.c".d` → ["a", "b.c", "d"]."""
    parts: list[str] = []
    for m in re.finditer(r'\s*("(?:[^"\\]|\\.)*"|\'[^\']*\'|[A-Za-z0-9_-]+)\s*(?:\.|$)', key):
        token = m.group(1)
        if token.startswith('"'):
            parts.append(json.loads(token))
        elif token.startswith("'"):
            parts.append(token[1:-1])
        else:
            parts.append(token)
    return parts


def _scan_value(line: str, depth: int, ml: str | None) -> tuple[int, str | None]:
    """Advance (bracket depth, open multi-line string delimiter) over one line of a value."""
    i = 0
    while i < len(line):
        if ml is not None:
            end = line.find(ml, i)
            if end < 0:
                return depth, ml
            i, ml = end + 3, None
            continue
        c = line[i]
        if c == "#":
            break
        if line.startswith(('"""', "'''"), i):
            ml, i = line[i : i + 3], i + 3
        elif c in "\"'":
            i += 1
            while i < len(line) and line[i] != c:
                i += 2 if c == '"' and line[i] == "\\" else 1
            i += 1
        else:
            depth += (c in "[{") - (c in "]}")
            i += 1
    return depth, ml


_HEADER = re.compile(r"^\s*(\[\[?)\s*(.+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*((?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_.\s-])+?)\s*=""")


def key_lines(text: str) -> dict[KeyPath, int]:
    """The 1-based line of every table header, array-of-tables entry and key in a TOML text.

    Keys inside inline tables and arrays are not listed: their parent key's line stands for them.
    """
    lines: dict[KeyPath, int] = {}
    counters: dict[KeyPath, int] = {}
    table: KeyPath = ()
    depth, ml = 0, None
    for number, line in enumerate(text.splitlines(), start=1):
        if depth or ml:
            depth, ml = _scan_value(line, depth, ml)
            continue
        header = _HEADER.match(line)
        if header and not _KEY.match(line):
            path = tuple(_split_key(header.group(2)))
            if header.group(1) == "[[":
                index = counters.get(path, -1) + 1
                counters[path] = index
                lines.setdefault(path, number)
                table = (*path, index)
            else:
                table = path
            lines.setdefault(table, number)
            continue
        key = _KEY.match(line)
        if key:
            lines.setdefault((*table, *_split_key(key.group(1))), number)
            depth, ml = _scan_value(line[key.end() :], 0, None)
    return lines


def _line_for(lines: dict[KeyPath, int], path: KeyPath) -> int | None:
    for n in range(len(path), 0, -1):
        if path[:n] in lines:
            return lines[path[:n]]
    return None


def _data_path(data: Any, loc: tuple[Any, ...]) -> KeyPath:
    """The part of a pydantic error location that exists in the data (drops union tags); a key
    that is missing or unknown is kept as the last element so messages can name it."""
    out: list[str | int] = []
    for part in loc:
        if isinstance(data, dict) and isinstance(part, str):
            out.append(part)
            if part not in data:
                break
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            out.append(part)
            data = data[part]
        else:
            break
    return tuple(out)


def _dotted(path: KeyPath) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


# --- layers ------------------------------------------------------------------------------------


@dataclass
class Layer:
    """One policy file as read: its text, its data and where each key sits."""

    name: str  # how messages name the file
    path: Path
    text: str
    data: dict[str, Any]
    lines: dict[KeyPath, int]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def problem(self, path: KeyPath, message: str) -> Problem:
        return Problem(self.name, _line_for(self.lines, path), message)


@dataclass
class LoadedPolicy:
    """The effective policy and where every part of it came from."""

    policy: Policy
    layers: list[Layer]  # bases first, the loaded file last
    rule_origins: list[tuple[int, int]] = field(default_factory=list)  # (layer, index in layer)

    @property
    def sha256(self) -> str:
        """sha256 of the file when there is one layer; else of the layers' sha256 lines in order
        (reproduce with ``sha256sum BASE FILE | cut -d' ' -f1 | sha256sum``)."""
        if len(self.layers) == 1:
            return self.layers[0].sha256
        manifest = "".join(f"{layer.sha256}\n" for layer in self.layers)
        return hashlib.sha256(manifest.encode()).hexdigest()

    def rule_layer(self, index: int) -> tuple[Layer, int]:
        layer_index, original = self.rule_origins[index]
        return self.layers[layer_index], original

    def locate(self, path: KeyPath) -> tuple[Layer, int | None] | None:
        """The most derived layer that sets ``path`` (or the closest enclosing key), and the line."""
        if path[:2] == ("shell", "rules") and len(path) > 2 and isinstance(path[2], int):
            layer, original = self.rule_layer(path[2])
            inner = ("shell", "rules", original, *path[3:])
            return layer, _line_for(layer.lines, inner)
        for n in range(len(path), 0, -1):
            for layer in reversed(self.layers):
                if path[:n] in layer.lines:
                    return layer, layer.lines[path[:n]]
        return None

    def where(self, path: KeyPath) -> str:
        """"file:line" of a key, for verdicts and findings; "built-in default" if no file sets it."""
        found = self.locate(path)
        if found is None:
            return "built-in default"
        layer, line = found
        return f"{layer.name}:{line}" if line else layer.name

    def problem(self, path: KeyPath, message: str) -> Problem:
        found = self.locate(path)
        if found is None:
            return Problem(self.layers[-1].name, None, message)
        return Problem(found[0].name, found[1], message)


def preset_path(name: str) -> Path:
    path = preset_file(name)
    if path is None:
        raise PolicyLoadError(
            [Problem(name, None, f"no preset named {name!r} (presets: {', '.join(preset_names())})")]
        )
    return path


def validation_problems(layer: Layer, data: Any, exc: ValidationError) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[tuple[int | None, str]] = set()
    for error in exc.errors():
        path = _data_path(data, tuple(error["loc"]))
        if error["type"] == "extra_forbidden":
            message = f"unknown key {_dotted(path)!r}"
        elif error["type"] == "missing":
            message = f"missing required key {_dotted(path)!r}"
        else:
            msg = str(error["msg"]).removeprefix("Value error, ")
            message = f"{_dotted(path) or 'policy'}: {msg}"
        problem = layer.problem(path, message)
        if (problem.line, message) not in seen:
            seen.add((problem.line, message))
            problems.append(problem)
    return problems


def _read(path: Path) -> Layer:
    name = _display(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyLoadError([Problem(name, None, f"cannot read: {exc}")]) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise PolicyLoadError(
            [Problem(name, int(m.group(1)) if m else None, f"invalid TOML: {message}")]
        ) from exc
    layer = Layer(name=name, path=path, text=text, data=data, lines=key_lines(text))
    try:
        Policy.model_validate(data)  # each file on its own, so errors point into that file
    except ValidationError as exc:
        raise PolicyLoadError(validation_problems(layer, data, exc)) from exc
    return layer


def _linearise(path: Path, stack: tuple[Path, ...], out: list[Layer]) -> None:
    """Bases first (depth-first, each file once), the file itself last."""
    path = path.resolve()
    if path in stack:
        chain = " → ".join(_display(p) for p in (*stack, path))
        raise PolicyLoadError([Problem(_display(path), None, f"extends cycle: {chain}")])
    if any(layer.path == path for layer in out):
        return
    layer = _read(path)
    for n, spec in enumerate(layer.data.get("extends", [])):
        if "/" in spec or spec.endswith(".toml"):
            base = (path.parent / spec).resolve()
            if not base.is_file():
                raise PolicyLoadError([layer.problem(("extends", n), f"no file {spec!r} to extend")])
        else:
            try:
                base = preset_path(spec)
            except PolicyLoadError as exc:
                raise PolicyLoadError(
                    [layer.problem(("extends",), exc.problems[0].message)]
                ) from None
        _linearise(base, (*stack, path), out)
    out.append(layer)


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load(path: str | Path) -> LoadedPolicy:
    """Read a policy file and everything it extends; validate each file and the result."""
    layers: list[Layer] = []
    _linearise(Path(path), (), layers)
    data: dict[str, Any] = {}
    rules: list[tuple[dict[str, Any], tuple[int, int]]] = []
    for number, layer in enumerate(layers):
        own = layer.data.get("shell", {}).get("rules", [])
        ids = {rule.get("id") for rule in own}
        rules = [
            (rule, (number, i)) for i, rule in enumerate(own)
        ] + [(rule, origin) for rule, origin in rules if rule.get("id") not in ids]
        data = _merge(data, layer.data)
    data.setdefault("shell", {})
    data["shell"] = {**data["shell"], "rules": [rule for rule, _ in rules]}
    data["extends"] = []  # already applied
    loaded = LoadedPolicy(policy=Policy.model_construct(), layers=layers,
                          rule_origins=[origin for _, origin in rules])
    try:
        loaded.policy = Policy.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = _data_path(data, tuple(error["loc"]))
            problems.append(loaded.problem(where, f"{_dotted(where)}: {error['msg']}"))
        raise PolicyLoadError(problems) from exc
    return loaded
