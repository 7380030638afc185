"""Policy → container configuration and shell limits."""

from __future__ import annotations

from executor.sandbox_config import GIT_HARDENING, docker_config, shell_limits
from policies.engine import load_policy


def test_default_policy_limits_reach_the_container_config() -> None:
    policy = load_policy("default").policy
    cfg = docker_config(policy)
    assert cfg.network == "none" and not cfg.read_only_workspace
    assert cfg.memory == policy.shell.resources.memory and cfg.pids_limit == policy.shell.resources.pids
    assert cfg.limits.max_timeout_s == policy.shell.max_timeout_ms / 1000
    assert cfg.limits.max_output_bytes == policy.shell.output_cap_bytes
    assert dict(cfg.env) == {**GIT_HARDENING, **policy.shell.env}
    limits = shell_limits(policy)
    assert limits == cfg.limits  # one limits type: the handler and the container agree
    assert limits.max_timeout_s == policy.shell.max_timeout_ms / 1000
    assert limits.default_timeout_s <= limits.max_timeout_s


def test_strict_policy_mounts_the_workspace_read_only() -> None:
    assert docker_config(load_policy("strict").policy).read_only_workspace
    assert not docker_config(load_policy("strict").policy, read_only=False).read_only_workspace


def test_a_network_allow_list_becomes_an_egress_allow_list(tmp_path) -> None:  # type: ignore[no-untyped-def]
    policy_file = tmp_path / "p.toml"
    policy_file.write_text(
        'version = 1\nextends = ["default"]\n\n[shell]\nnetwork = ["pkgs.example.test", "*.mirror.example.test"]\n'
    )
    cfg = docker_config(load_policy(policy_file).policy)
    assert cfg.network_allow == ("pkgs.example.test", "*.mirror.example.test")
    assert docker_config(load_policy("default").policy).network_allow is None


def test_read_only_globs_that_name_a_path_become_mounts() -> None:
    from executor.sandbox_config import read_only_paths

    assert read_only_paths([".git/**", "secrets", "*.lock", "build/*.o", "secrets/"]) == (".git", "secrets")
    assert docker_config(load_policy("default").policy).read_only_paths == (".git",)


def test_git_stays_read_only_even_when_a_policy_forgets_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    policy_file = tmp_path / "p.toml"
    policy_file.write_text('version = 1\nextends = ["default"]\n\n[files]\nread_only = ["secrets/**"]\n')
    assert docker_config(load_policy(policy_file).policy).read_only_paths == (".git", "secrets")
