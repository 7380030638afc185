"""``sandloop mcp``'s apply_patch, refused by the patch's own path checks (a read-only glob,
``.git``, a path climbing out of the checkout): the structured ``refused`` names the rule, the
file is untouched, and the refusal is one DENY record in the run's verified audit chain."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.api.scenario import GIT_CONFIG
from tests.mcp_server.harness import SANDLOOP, env, sandboxes, stdio, structured, wait_until

pytestmark = pytest.mark.docker

POLICY = """\
version = 1
extends = ["default"]

[files]
read_only = ["**/.git/**", "victim"]
"""

#: (arguments, the refused path, the rule)
CASES: list[tuple[dict[str, Any], str, str]] = [
    ({"patch": "@@\n-[core]\n+[x]\n", "operation": "update_file", "path": ".git/config"}, ".git/config",
     "files.read_only"),
    ({"patch": "+out\n", "operation": "create_file", "path": "../outside.txt"}, "../outside.txt", "files.path"),
    ({"patch": "*** Begin Patch\n*** Add File: notes.txt\n+ok\n*** Delete File: victim\n*** End Patch\n"},
     "victim", "files.read_only"),
]


async def test_a_patch_refused_by_its_path_is_refused_structured_and_audited(
        docker_client: Any, repo: Path, tmp_path: Path, state: Path) -> None:
    policy = tmp_path / "ro-policy.toml"
    policy.write_text(POLICY)
    outside = repo.parent / "outside.txt"
    outside.write_text("keep\n")
    async with Client(stdio(repo, "--policy", str(policy), "--browser", "off")) as client:
        for arguments, path, rule in CASES:
            result = await client.call_tool("apply_patch", arguments)
            answer = structured(result)
            assert result.is_error and not answer["applied"] and answer["files"] == []
            assert answer["refused"] is not None, answer
            assert (answer["refused"]["path"], answer["refused"]["rule_id"]) == (path, rule)
    wait_until(lambda: not sandboxes(docker_client, repo), 60, "the sandbox removed after the client left")

    assert (repo / ".git" / "config").read_text() == GIT_CONFIG
    assert outside.read_text() == "keep\n"
    assert (repo / "victim").read_text() == "keep me\n" and not (repo / "notes.txt").exists()

    (folder,) = list((state / "sandloop" / "runs").iterdir())
    records = [json.loads(line) for line in (folder / "audit.jsonl").read_text().splitlines()]
    denied = [(r["path"], r["rule_id"]) for r in records
              if r["kind"] == "decision" and r["action"] == "patch" and r["decision"] == "deny"]
    assert denied == [(path, rule) for _, path, rule in CASES]
    verify = subprocess.run([SANDLOOP, "audit", "verify", "--summary", str(folder / "summary.json"),
                             str(folder / "audit.jsonl")], capture_output=True, text=True, env=env())
    assert verify.returncode == 0, verify.stdout + verify.stderr
