"""What the examples share: their command line, and a scratch copy of the demo's checkout.

Every example runs against the real OpenAI API by default (OPENAI_API_KEY), or against any
Responses endpoint with ``--base-url``. Without ``--repo`` it works on a fresh copy of the
demo's checkout (a tiny package whose test fails), so your own files are never touched.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from executor.demo import DEMO_DIR

DEMO_REPO = DEMO_DIR / "repo"  # the checkout `sandloop run --demo` fixes

TASK = ("The tests fail. Run them with `python3 -m unittest -v`, fix the bug with apply_patch, "
        "run them again, and answer with one sentence saying what you changed.")


def arguments(description: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", help="a Responses API endpoint (default: OPENAI_BASE_URL, "
                        "else the OpenAI API); the key is OPENAI_API_KEY")
    parser.add_argument("--model", default="gpt-5.4", help="the model (default: gpt-5.4)")
    parser.add_argument("--repo", type=Path, help="the checkout to work in (default: a scratch copy "
                        "of the demo's checkout)")
    parser.add_argument("--policy", default="default", help="a policy file or preset name")
    parser.add_argument("--task", default=TASK, help="what the model should do")
    return parser.parse_args()


@contextlib.contextmanager
def checkout(repo: Path | None) -> Iterator[Path]:
    """``repo``, or a scratch copy of the demo's checkout removed afterwards."""
    if repo is not None:
        yield repo
        return
    with tempfile.TemporaryDirectory(prefix="sandloop-example-") as tmp:
        yield Path(shutil.copytree(DEMO_REPO, Path(tmp) / "repo"))
