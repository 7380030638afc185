"""From a policy to the limits the back-ends enforce: one place, so nothing is merely hinted.

The policy's ``[shell]`` section decides the container's resources, runtime, environment and
timeouts; the session and the helper then enforce them whatever a call asks for.
"""

from __future__ import annotations

from dataclasses import replace

from policies.model import Policy
from sandbox.docker import DockerConfig
from sandloop.limits import Limits
from sandloop.matching import glob_base

__all__ = ["GIT_HARDENING", "docker_config", "read_only_paths", "shell_limits"]

#: What every sandboxed command's git reads, so git never runs a program named in a config file
#: a command could write: no user or system config (HOME and /etc are the sandbox's), no
#: fsmonitor, no hooks, no pager, editor or ask-pass program from any config, and an identity for
#: commits made in the sandbox (user config being out of reach). A policy's [shell] env may
#: override any of them, deliberately.
GIT_HARDENING: dict[str, str] = {
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "core.fsmonitor",
    "GIT_CONFIG_VALUE_0": "false",
    "GIT_CONFIG_KEY_1": "core.hooksPath",
    "GIT_CONFIG_VALUE_1": "/dev/null",
    "GIT_PAGER": "cat",
    "GIT_EDITOR": "true",
    "GIT_SEQUENCE_EDITOR": "true",
    "GIT_ASKPASS": "false",
    "GIT_SSH_COMMAND": "false",
    "GIT_AUTHOR_NAME": "sandloop agent",
    "GIT_AUTHOR_EMAIL": "agent@sandloop.invalid",
    "GIT_COMMITTER_NAME": "sandloop agent",
    "GIT_COMMITTER_EMAIL": "agent@sandloop.invalid",
}


def shell_limits(policy: Policy) -> Limits:
    shell = policy.shell
    return Limits(
        default_timeout_s=min(shell.default_timeout_ms, shell.max_timeout_ms) / 1000,
        max_timeout_s=shell.max_timeout_ms / 1000,
        max_output_bytes=shell.output_cap_bytes,
    )


def read_only_paths(globs: list[str]) -> tuple[str, ...]:
    """The read-only globs that name a whole path (``.git/**``, ``**/.git/**``, ``secrets``) become read-only
    mounts, so shell commands cannot write there either; patterns like ``*.lock`` stay
    patch-only rules, since a mount needs a fixed path."""
    bases = (glob_base(glob) for glob in globs)
    return tuple(dict.fromkeys(base for base in bases if base is not None))


def docker_config(policy: Policy, base: DockerConfig | None = None, *, read_only: bool | None = None) -> DockerConfig:
    """The container a policy asks for. A read-only workspace follows from a policy that lets no
    patch write anywhere (``strict``), unless the caller says otherwise."""
    shell = policy.shell
    base = base or DockerConfig()
    if read_only is None:
        read_only = not policy.files.writable
    return replace(
        base,
        read_only_workspace=read_only,
        memory=shell.resources.memory,
        cpus=shell.resources.cpus,
        pids_limit=shell.resources.pids,
        runtime=shell.runtime,
        env={**GIT_HARDENING, **shell.env},
        # .git always: what the host's git runs is never the sandbox's to change, whatever a
        # policy's patch rules say (lint flags a policy that leaves it writable).
        read_only_paths=tuple(dict.fromkeys((".git", *read_only_paths(policy.files.read_only)))),
        # "none" keeps network_mode=none; a list is enforced by the egress proxy, never hinted.
        network_allow=None if shell.network == "none" else tuple(shell.network),
        limits=shell_limits(policy),
    )
