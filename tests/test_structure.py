"""The structure holds: every module imports on its own, and the programs sandloop ships into a
sandbox run on the standard library alone. (The layering itself is import-linter's contracts in
pyproject.toml, checked by ``make test``.)"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox import bundle
from sandbox.environment import presets

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sandloop", "policies", "sandbox", "executor")


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if not all((folder / "__init__.py").exists() for folder in path.parents if ROOT in folder.parents):
                continue  # data shipped with a package (the demo's repository), not a module of ours
            if "agents_sdk" in path.parts and importlib.util.find_spec("agents") is None:
                continue  # the optional extra (sandloop[agents]) is not installed
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            names.append(".".join(parts))
    return names


# Each module is imported in a child forked from an interpreter that has imported the third-party
# libraries but none of the project's modules: exactly ``python -c "import X"`` as far as the
# project's own import order is concerned (a cycle shows up), at a fork's cost instead of a
# fresh interpreter's.
# Heavy optional libraries are imported first too when installed (the MCP SDK, jsonschema,
# cryptography), so the children time only sandloop's own modules: on a loaded machine each child
# re-importing them made this test slow enough to time out.
_PROBE = textwrap.dedent("""
    import importlib, os, sys, traceback
    for lib in ("openai", "pydantic", "docker", "playwright.async_api", "rich.console", "unidiff",
                "tree_sitter", "tree_sitter_bash", "websockets", "PIL.Image"):
        importlib.import_module(lib)
    for lib in ("mcp", "mcp.server", "jsonschema", "cryptography", "cryptography.x509"):
        try:
            importlib.import_module(lib)
        except ImportError:
            pass  # not installed: nothing to import ahead
    assert not any(m.split(".")[0] in {packages!r} for m in sys.modules), "imported too early"
    failed = 0
    for name in sys.argv[1:]:
        pid = os.fork()
        if pid == 0:
            try:
                importlib.import_module(name)
            except BaseException:
                print(f"--- import {{name}} failed:\\n{{traceback.format_exc()}}", flush=True)
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        failed += status != 0
    sys.exit(1 if failed else 0)
""").format(packages=set(PACKAGES))


def test_every_module_imports_on_its_own() -> None:
    modules = _modules()
    assert len(modules) > 60 and "sandbox.patch.apply" in modules
    result = subprocess.run([sys.executable, "-c", _PROBE, *modules], cwd=ROOT, capture_output=True,
                            text=True, timeout=900)  # a hundred forks: minutes on a loaded 2-core machine
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("modules", [bundle.PROXY_MODULES, presets.PRESETS["python"].programs[presets.PYTHON_SETUP]],
                         ids=["egress-proxy", "python-setup"])
def test_shipped_programs_need_only_the_standard_library(modules: tuple[str, ...], tmp_path: Path) -> None:
    app = tmp_path / "app.pyz"
    app.write_bytes(bundle.zipapp(modules))
    # -I: no environment, no user site; -S: no site-packages. What runs here runs in any image.
    result = subprocess.run([sys.executable, "-I", "-S", str(app), "--help"], capture_output=True,
                            text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout
    assert bundle.zipapp(modules) == app.read_bytes()  # built the same way every time
