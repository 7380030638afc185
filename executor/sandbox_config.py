"""From a policy to the limits the back-ends enforce: one place, so nothing is merely hinted.

The policy's ``[shell]`` section decides the container's resources, runtime, environment and
timeouts; the session and the helper then enforce them whatever a call asks for.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from policies.lint import secrets_not_allowed
from policies.model import LoadedPolicy, Policy
from sandbox.docker import DockerConfig
from sandbox.environment.prepare import Prepared
from sandbox.environment.spec import EnvironmentSpec
from sandbox.injection import SecretSpec
from sandloop.errors import ConfigError
from sandloop.limits import Limits
from sandloop.matching import glob_base, host_entry, match_host

__all__ = ["GIT_HARDENING", "docker_config", "environment_spec", "read_only_paths", "secret_specs", "shell_limits"]

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


def _protected(policy: Policy) -> tuple[str, ...]:
    # .git always: what the host's git runs is never the sandbox's to change, whatever a
    # policy's patch rules say (lint flags a policy that leaves it writable).
    return tuple(dict.fromkeys((".git", *read_only_paths(policy.files.read_only))))


def secret_specs(policy: Policy, allow: list[str] | tuple[str, ...] | None) -> tuple[SecretSpec, ...]:
    """The policy's ``[secrets]`` whose host:port ``allow`` (a network list) lets commands reach
    (None: all of them; environment setup picks by the hosts it may reach, known only then).
    A secret no list of the policy allows is a one-line ConfigError: lint's
    ``secret-host-not-allowed``, refused at start too, since it could never be sent."""
    unreachable = secrets_not_allowed(policy)
    if unreachable:
        name, why = unreachable[0]
        raise ConfigError(f"secret {name!r} is for {policy.secrets[name].host}:{policy.secrets[name].port}: {why}")
    entries = [host_entry(entry) for entry in allow or []]
    return tuple(
        SecretSpec(name=name, host=s.host, port=s.port, env=s.env, file=s.file, header=s.header,
                   template=s.template, basic=s.basic, private=s.private)
        for name, s in policy.secrets.items() if allow is None or match_host(entries, s.host, s.port) is not None)


def docker_config(policy: Policy, base: DockerConfig | None = None, *, read_only: bool | None = None,
                  prepared: Prepared | None = None) -> DockerConfig:
    """The container a policy asks for. A read-only workspace follows from a policy that lets no
    patch write anywhere (``strict``), unless the caller says otherwise. ``prepared``: the
    environment the session starts from (its image, its PATH, the host CA it trusts)."""
    shell = policy.shell
    base = base or DockerConfig()
    if read_only is None:
        read_only = not policy.files.writable
    config = replace(
        base,
        read_only_workspace=read_only,
        memory=shell.resources.memory,
        cpus=shell.resources.cpus,
        pids_limit=shell.resources.pids,
        runtime=shell.runtime,
        env={**GIT_HARDENING, **shell.env},
        read_only_paths=_protected(policy),
        # "none" keeps network_mode=none; a list is enforced by the egress proxy, never hinted.
        network_allow=None if shell.network == "none" else tuple(shell.network),
        secrets=secret_specs(policy, [] if shell.network == "none" else shell.network),
        limits=shell_limits(policy),
        writable_root=policy.session.writable_root,
    )
    if prepared is None:
        return config
    # The environment's PATH (its prefix first) unless the policy's [shell] env sets one.
    return replace(config, image=prepared.image or config.image, ca_bundle=prepared.ca_bundle,
                   env={**GIT_HARDENING, **prepared.env(), **shell.env})


def _policy_relative(loaded: LoadedPolicy, key: str, value: str) -> Path:
    """A path in the [environment] section, relative to the policy file that sets it."""
    found = loaded.locate(("environment", key))
    folder = found[0].path.parent if found is not None else Path.cwd()
    return (folder / value).resolve()


def environment_spec(loaded: LoadedPolicy, image: str | None = None) -> EnvironmentSpec:
    """The policy's [environment] for the builder: paths resolved against the policy file that
    sets them, the sandbox's own resources, runtime, read-only paths and variables (setup runs in
    the same sandbox as the agent). ``image`` (``sandloop run --image``) replaces the section's
    image or Dockerfile for one run."""
    policy = loaded.policy
    section = policy.environment
    shell = policy.shell
    dockerfile = context = None
    if image is None and section.dockerfile is not None:
        dockerfile = _policy_relative(loaded, "dockerfile", section.dockerfile)
        if section.context is not None:
            context = _policy_relative(loaded, "context", section.context)
    return EnvironmentSpec(
        image=image if image is not None else section.image,
        preset=section.preset,
        dockerfile=dockerfile,
        context=context,
        packages=tuple(section.packages),
        setup=tuple(section.setup),
        setup_network=tuple(section.setup_network),
        setup_registries=tuple(dict.fromkeys(section.setup_registries)),
        cache_key=tuple(section.cache_key),
        cache_paths=tuple(section.cache_paths),
        trust_host_ca=section.trust_host_ca,
        setup_timeout_s=float(section.setup_timeout_s),
        memory=shell.resources.memory,
        cpus=shell.resources.cpus,
        pids_limit=shell.resources.pids,
        runtime=shell.runtime,
        read_only_paths=_protected(policy),
        env={**GIT_HARDENING, **shell.env},
        secrets=secret_specs(policy, None),
    )
