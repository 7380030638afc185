"""A shell command that writes a file is decided by the ``[files]`` rules like a patch: a
redirection, ``tee``, ``dd of=``, ``cp``/``mv``/``ln`` destinations, ``sed -i``, ``truncate`` …
into a read-only path, or outside the writable globs, is refused — and ``explain`` says which
files rule decided. Package managers' abbreviations and aliases are read as the tool reads them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from executor.approvals import DenyAll
from executor.handlers.shell import EXIT_DENIED, run_steps
from executor.policy_gate import PolicyGate
from executor.sandbox_config import docker_config
from policies.audit import AuditLog
from policies.engine import PolicyEngine, load_policy
from sandbox.docker import DockerSession
from sandloop.verdict import Decision

POLICY = """\
version = 1
extends = ["default"]
[files]
writable = ["src/**", "notes/**", "*.txt"]
read_only = ["**/.git/**", ".github/**", "*.cfg", "*.lock"]
"""

REFUSED_WRITES = [
    "echo x > .github/workflows/ci.yml",
    "echo x >> setup.cfg",
    "echo x >| setup.cfg",
    "echo x &> setup.cfg",
    "echo x 1> setup.cfg",
    "{ echo x; } > setup.cfg",
    "cat <<EOF > setup.cfg\nx\nEOF",
    "while read l; do echo $l; done < src/a.py > setup.cfg",
    "echo x | tee setup.cfg",
    "echo x | tee -a notes/ok.txt .github/workflows/ci.yml",
    "echo x | dd of=setup.cfg",
    "cp src/a.py setup.cfg",
    "cp -r src .github",
    "cp -t .github src/a.py",
    "mv setup.cfg src/moved.py",
    "mv src/a.py setup.cfg",
    "install -m 644 src/a.py poetry.lock",
    "ln -s setup.cfg src/link && echo x > src/link",
    "ln -sf .github/workflows/ci.yml notes/x",
    "sed -i s/a/b/ setup.cfg",
    "sed -i.bak -e s/a/b/ setup.cfg",
    "truncate -s 0 setup.cfg",
    "touch README.md",
    "rm -f setup.cfg",
    "chmod 777 setup.cfg",
    "sort -o setup.cfg src/a.py",
    "uniq src/a.py setup.cfg",
    "gzip setup.cfg",
    "cd .github && echo x > workflows/ci.yml",
    "cd src; echo x > ../setup.cfg",
    "cd notes && cd .. && echo x > setup.cfg",
    "echo x > /workspace/setup.cfg",
    "echo x > ./src/../setup.cfg",
    "git init -q sub && echo x >> sub/.git/config",
    "echo x > \"$OUT\"",
    "tar -xf a.tar",
    "unzip -o a.zip",
    "patch -p1 < fix.diff",
    "bash -c 'echo x > setup.cfg'",
    "cd src && bash -c 'echo x > ../setup.cfg'",
    "find . -name '*.py' -exec cp {} setup.cfg \\;",
    "xargs -I{} cp {} setup.cfg < list",
    "mkdir .github/x",
    "mkdir -p -m 755 .github/actions/x",
    "git apply fix.diff",
    "git am < fix.mbox",
    "git checkout -- setup.cfg",
    "git restore setup.cfg",
    "git -C .github restore workflows/ci.yml",
    "git mv src/a.py setup.cfg",
    "git rm setup.cfg",
    "git --work-tree=. checkout -- .",
]

ALLOWED_WRITES = [
    "echo x > notes/today.txt",
    "echo x >> src/a.py",
    "echo x > /tmp/scratch",
    "ls > /dev/null 2>&1",
    "echo x | tee notes/log.txt",
    "cp src/a.py src/b.py",
    "cd src && echo x > c.py",
    "sed -n 1p setup.cfg",
    "echo x > out.txt",
    "tar -czf notes/a.tgz src",
    "mkdir -p src/pkg",
    "git apply --check fix.diff",
    "git restore --staged setup.cfg",
    "git rm --cached setup.cfg",
    "git status",
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> PolicyEngine:
    path = tmp_path_factory.mktemp("policy") / "policy.toml"
    path.write_text(POLICY)
    return load_policy(str(path))


@pytest.mark.parametrize("line", REFUSED_WRITES)
def test_a_write_outside_the_writable_paths_is_not_allowed(line: str, engine: PolicyEngine) -> None:
    verdict = engine.shell(line)
    assert verdict.decision is not Decision.ALLOW, (line, verdict)
    assert verdict.rule_id and verdict.rule_id.startswith("files."), (line, verdict)


@pytest.mark.parametrize("line", ALLOWED_WRITES)
def test_writes_the_rules_allow_still_run(line: str, engine: PolicyEngine) -> None:
    verdict = engine.shell(line)
    assert verdict.decision is Decision.ALLOW, (line, verdict)


def test_explain_names_the_files_rule(engine: PolicyEngine) -> None:
    out = subprocess.run([sys.executable, "-m", "executor.cli", "policy", "explain", "--json",
                          str(engine.path), "--", "echo x >> setup.cfg"], capture_output=True, text=True, timeout=60)
    report = json.loads(out.stdout)
    assert report["verdict"]["decision"] == "deny"
    assert report["verdict"]["rule_id"] == "files.read_only"
    assert "setup.cfg" in report["verdict"]["justification"]
    assert report["verdict"]["source"].endswith("policy.toml:5")


@pytest.mark.parametrize(("line", "rule"), [
    ("npm publ", "publish-js"), ("npm pub --access public", "publish-js"), ("npm inst left-pad", "package-install"),
    ("npm isntall left-pad", "package-install"), ("npm i left-pad", "package-install"),
    ("npm --loglevel silent publish", "publish-js"), ("yarn", "package-install"),
    ("yarn global add serve", "package-install"), ("yarn add left-pad", "package-install"),
    ("pnpm i", "package-install"), ("pnpm up", "package-install"), ("bun a left-pad", "package-install"),
    ("uv pip install requests", "package-install"), ("uv tool run ruff", "package-install-other"),
    ("uvx ruff", "launchers"), ("pip wheel .", "package-install"), ("pip download x", "package-install"),
    ("go mod download", "package-install-other"), ("npm explore lodash -- rm -rf /", "rm"),
    ("npm rebuild", "package-install"), ("npm x cowsay", "package-run-remote"),
    ("uv run --with requests pytest", "package-install-other"),
    ("uv run -q --with-requirements r.txt pytest", "package-install-other"),
])
def test_package_manager_spellings_are_read_as_the_tool_reads_them(line: str, rule: str) -> None:
    for preset in ("default", "ci"):
        verdict = load_policy(preset).shell(line)
        assert verdict.decision is not Decision.ALLOW, (line, preset, verdict)
    assert load_policy("default").shell(line).rule_id in (rule, "package-install", "package-install-other",
                                                          "publish-js", "npm-explore", "rm")


@pytest.mark.parametrize("line", ["python3 -m pytest -q", "python3 -m unittest -v", "python -m pytest tests/",
                                  "npm test", "npm run test", "pytest -q"])
@pytest.mark.parametrize("preset", ["default", "ci"])
def test_test_runners_run_unattended(line: str, preset: str) -> None:
    assert load_policy(preset).shell(line).decision is Decision.ALLOW


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def guarded(tmp_path_factory: pytest.TempPathFactory, engine: PolicyEngine, docker_client: object
                  ) -> AsyncIterator[tuple[DockerSession, PolicyGate, Path]]:
    ws = tmp_path_factory.mktemp("writes") / "repo"
    ws.mkdir()
    gate = PolicyGate(engine, DenyAll(), AuditLog(ws.parent / "audit.jsonl"))
    session = await DockerSession.create(ws, docker_config(engine.policy))
    try:
        yield session, gate, ws
    finally:
        await session.close()


@pytest.mark.docker
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("line", [line for line in REFUSED_WRITES if "setup.cfg" in line])
async def test_the_protected_file_is_untouched(line: str, guarded: tuple[DockerSession, PolicyGate, Path]) -> None:
    session, gate, ws = guarded
    reset = await session.run("find /workspace -mindepth 1 -delete; mkdir -p src notes && echo 'a = 1' > src/a.py "
                              "&& echo '[tool]' > setup.cfg && echo src/a.py > list", timeout_s=30)
    assert reset.exit_code == 0, reset.stderr.text
    before = (ws / "setup.cfg").read_bytes()
    (step,) = await run_steps([line], session, gate, call_id="call_w", timeout_ms=30_000, limits=session.limits)
    assert step.exit_code == EXIT_DENIED, (line, step)
    assert (ws / "setup.cfg").read_bytes() == before


@pytest.mark.docker
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("tool", ["apply_patch", "custom"])
async def test_a_patch_over_the_size_limit_is_refused(tool: str, guarded: tuple[DockerSession, PolicyGate, Path]
                                                      ) -> None:
    """``max_patch_bytes`` (1 MiB by default) holds for both patch tools, whatever the file."""
    from openai.types.responses import ResponseApplyPatchToolCall, ResponseCustomToolCall

    from executor.handlers.apply_patch import ApplyPatchCallKind
    from executor.handlers.custom import CustomToolCallKind
    from executor.toolbox import Toolbox

    session, gate, ws = guarded
    await session.run("find /workspace -mindepth 1 -delete; mkdir -p notes", timeout_s=30)
    body = "".join(f"+line {i} {'x' * 60}\n" for i in range(33_000))  # ≈ 2.1 MB
    toolbox = Toolbox(gate=gate, session=session, patch_tool="custom" if tool == "custom" else "native")
    if tool == "apply_patch":
        call = ResponseApplyPatchToolCall.model_validate({
            "type": "apply_patch_call", "id": "apc_1", "call_id": "call_big", "status": "completed",
            "operation": {"type": "create_file", "path": "notes/big.txt", "diff": body}})
        out = await ApplyPatchCallKind(toolbox).handle(call)
        assert out["status"] == "failed"
    else:
        custom = ResponseCustomToolCall.model_validate({
            "type": "custom_tool_call", "id": "ctc_1", "call_id": "call_big", "name": "apply_patch",
            "input": f"*** Begin Patch\n*** Add File: notes/big.txt\n{body}*** End Patch\n"})
        out = await CustomToolCallKind(toolbox).handle(custom)
    assert "max_patch_bytes" in out["output"] and "denied by policy" in out["output"]
    assert not (ws / "notes" / "big.txt").exists()
