"""Policy → container configuration and shell limits."""

from __future__ import annotations

from executor.sandbox_config import docker_config, shell_limits
from policies.engine import load_policy


def test_default_policy_limits_reach_the_container_config() -> None:
    policy = load_policy("default").policy
    cfg = docker_config(policy)
    assert cfg.network == "none" and not cfg.read_only_workspace
    assert cfg.memory == policy.shell.resources.memory and cfg.pids_limit == policy.shell.resources.pids
    assert cfg.limits.max_timeout_s == policy.shell.max_timeout_ms / 1000
    assert cfg.limits.max_output_bytes == policy.shell.output_cap_bytes
    assert dict(cfg.env) == policy.shell.env
    limits = shell_limits(policy)
    assert limits.max_timeout_ms == policy.shell.max_timeout_ms
    assert limits.default_timeout_ms <= limits.max_timeout_ms


def test_strict_policy_mounts_the_workspace_read_only() -> None:
    assert docker_config(load_policy("strict").policy).read_only_workspace
    assert not docker_config(load_policy("strict").policy, read_only=False).read_only_workspace
