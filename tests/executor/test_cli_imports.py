"""Every command imports what it needs and nothing more: ``sandloop --version`` or ``sandloop
policy explain`` never pays for the openai client, Playwright or Docker.

Each command is the installed console script run in a fresh interpreter under ``-X
importtime``, which lists every module the process imports (site's included) — the real entry
point, nothing stubbed, so a module imported by any route shows up. Speed itself is measured in
``bench/cli_start.py``; this only keeps the imports out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tests.report.test_logs import one_shell_run

SCRIPT = Path(sys.executable).with_name("sandloop")
RUN_CLIENTS = {"openai", "playwright"}  # the Responses client and the browser: only runs need them
ENGINE = {"docker", "kubernetes"}


def _imports(*args: str, cwd: Path | None = None,
             state: Path | None = None) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``sandloop ARGS`` (with ``state`` as its XDG_STATE_HOME); what it printed and the
    top-level packages it imported."""
    env = {k: v for k, v in os.environ.items() if k != "SANDLOOP_DEBUG"}
    if state is not None:
        env["XDG_STATE_HOME"] = str(state)
    done = subprocess.run([sys.executable, "-X", "importtime", str(SCRIPT), *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env=env)
    modules = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
               if line.startswith("import time:") and "|" in line}
    # The probe works: the entry point's own module is in the list.
    assert "executor.cli" in modules, done.stderr[-2000:]
    return done, {name.split(".")[0] for name in modules}


def test_the_script_is_the_installed_entry_point() -> None:
    (script,) = entry_points(group="console_scripts", name="sandloop")
    assert script.value == "executor.cli:main" and SCRIPT.is_file()


def test_the_probe_sees_the_openai_client_when_a_run_imports_it() -> None:
    # The same listing, for an import that does pull the client in: an empty set below is not
    # the probe failing to see.
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import executor; executor.open_run"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "openai" in {line.rsplit("|", 1)[1].strip().split(".")[0] for line in done.stderr.splitlines()
                        if line.startswith("import time:")}


def test_version_imports_nothing_heavy() -> None:
    done, imported = _imports("--version")
    assert done.returncode == 0 and done.stdout.startswith("sandloop ")
    assert imported.isdisjoint(RUN_CLIENTS | ENGINE | {"pydantic", "rich", "tree_sitter"}), imported


@pytest.mark.parametrize("args", [
    ["policy", "explain", "default", "--", "git push origin main"],
    ["policy", "explain", "default", "--json", "--", "ls"],
    ["policy", "check", "strict"],
    ["policy", "schema"],
], ids=" ".join)
def test_policy_commands_need_no_client_and_no_engine(args: list[str], tmp_path: Path) -> None:
    done, imported = _imports(*args, state=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert imported.isdisjoint(RUN_CLIENTS | ENGINE), imported


@pytest.mark.parametrize("args", [
    ["--", "git push origin main"],
    ["--json", "--", "ls"],
    ["--url", "https://example.com/"],
], ids=" ".join)
def test_explain_from_a_snapshot_needs_no_schema_models_and_no_rich(args: list[str], tmp_path: Path) -> None:
    # The first explain loads the file (and keeps a snapshot); the next decides from the snapshot.
    first, imported = _imports("policy", "explain", "default", *args, state=tmp_path)
    assert first.returncode == 0 and "pydantic" in imported, first.stderr[-2000:]
    done, imported = _imports("policy", "explain", "default", *args, state=tmp_path)
    assert done.returncode == 0 and done.stdout == first.stdout, done.stderr[-2000:]
    assert imported.isdisjoint(RUN_CLIENTS | ENGINE | {"pydantic", "rich"}), imported
    # a URL parses no command line: the shell grammar is not loaded either
    assert ("tree_sitter" in imported) is (args[0] != "--url"), imported


def test_audit_and_report_need_no_client_and_no_engine(tmp_path: Path) -> None:
    one_shell_run(tmp_path)
    log = str(tmp_path / "audit.jsonl")
    for args in (["audit", "verify", log], ["audit", "summary", log],
                 ["report", str(tmp_path), "-o", str(tmp_path / "r.html")]):
        done, imported = _imports(*args)
        assert done.returncode == 0, done.stdout + done.stderr[-2000:]
        assert imported.isdisjoint(RUN_CLIENTS | ENGINE), (args, imported)
    assert (tmp_path / "r.html").is_file()


@pytest.mark.docker
@pytest.mark.parametrize("args", [["gc", "--json"], ["env", "ls", "--json"], ["doctor", "--json"]], ids=" ".join)
def test_engine_commands_need_no_client(args: list[str], docker_client: object, tmp_path: Path) -> None:
    # gc removes only what dead owners left behind, as every session start does.
    done, imported = _imports(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    json.loads(done.stdout)
    assert "docker" in imported and imported.isdisjoint(RUN_CLIENTS), imported


def test_env_prune_needs_no_client() -> None:
    # Its module only: pruning images on an engine other people use is not a test's to do (its
    # function imports nothing the module has not).
    done, imported = _imports("env", "prune", "--help")
    assert done.returncode == 0 and "--days" in done.stdout
    assert "docker" in imported and imported.isdisjoint(RUN_CLIENTS), imported


def test_help_lists_every_command_without_the_run_clients() -> None:
    done, imported = _imports("--help")
    assert done.returncode == 0
    for word in ("run", "replay", "policy", "audit", "report", "env", "doctor", "gc", "apply-patch", "k8s"):
        assert f"    {word} " in done.stdout, word
    assert imported.isdisjoint(RUN_CLIENTS), imported
