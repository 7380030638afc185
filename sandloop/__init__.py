"""sandloop's shared vocabulary: the words every other part of the project speaks.

The bottom layer of the project (see docs/architecture.md). Its modules import nothing else of
sandloop, and the ones the in-sandbox programs carry with them (``errors``, ``matching``) import
only the standard library, so they run inside any image with a ``python3``:

* :mod:`sandloop.errors` — the one exception tree, and the one model-facing text for it;
* :mod:`sandloop.verdict` — what a policy answers (a decision, the rule, why);
* :mod:`sandloop.files` — file facts, file changes and the kinds of patch operation;
* :mod:`sandloop.results` — what a command produced;
* :mod:`sandloop.limits` — what a command may take, enforced by every back-end;
* :mod:`sandloop.matching` — host-name and workspace-glob matching, written once.

The run API (the loop, toolboxes, policies, sessions) lives in ``executor``, ``policies`` and
``sandbox``; this package only names the things they exchange.
"""

__version__ = "0.1.0"
