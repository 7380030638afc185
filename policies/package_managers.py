"""What a package manager's command word really runs: abbreviations, aliases, typos, hidden installs.

``npm publ`` is ``npm publish`` (npm accepts any unambiguous prefix), ``npm isntall`` is
``npm install`` (npm forgives common typos), bare ``yarn`` is ``yarn install``. Policy rules name
the real commands; :func:`spellings` gives every argv a spelling may stand for — each candidate
command in place of the word — so the strictest rule among them decides. A prefix that several
commands share yields all of them: the package manager would refuse it, the policy asks.
``uv run --with X`` is also ``uv pip install X``.
"""

from __future__ import annotations

from collections.abc import Callable

from policies.shell_words import Dynamic, Word

__all__ = ["spellings"]

# npm 11's commands and the spellings npm itself maps onto them.
_NPM_COMMANDS = frozenset({
    "access", "adduser", "approve-scripts", "audit", "bugs", "cache", "ci", "completion", "config",
    "dedupe", "deny-scripts", "deprecate", "diff", "dist-tag", "docs", "doctor", "edit", "exec",
    "explain", "explore", "find-dupes", "fund", "get", "help", "help-search", "init", "install",
    "install-ci-test", "install-scripts", "install-test", "link", "ll", "login", "logout", "ls",
    "org", "outdated", "owner", "pack", "ping", "pkg", "prefix", "profile", "prune", "publish",
    "query", "rebuild", "repo", "restart", "root", "run", "sbom", "search", "set", "shrinkwrap",
    "stage", "star", "stars", "start", "stop", "team", "test", "token", "trust", "undeprecate",
    "uninstall", "unpublish", "unstar", "update", "version", "view", "whoami",
})
_NPM_ALIASES = {
    "author": "owner", "home": "docs", "issues": "bugs", "info": "view", "show": "view",
    "find": "search", "add": "install", "unlink": "uninstall", "remove": "uninstall",
    "rm": "uninstall", "r": "uninstall", "un": "uninstall", "rb": "rebuild", "list": "ls",
    "ln": "link", "create": "init", "i": "install", "it": "install-test", "cit": "install-ci-test",
    "u": "update", "up": "update", "c": "config", "s": "search", "se": "search", "tst": "test",
    "t": "test", "ddp": "dedupe", "v": "view", "run-script": "run", "clean-install": "ci",
    "clean-install-test": "install-ci-test", "x": "exec", "why": "explain", "la": "ll",
    "verison": "version", "ic": "ci", "innit": "init", "in": "install", "ins": "install",
    "inst": "install", "insta": "install", "instal": "install", "isnt": "install",
    "isnta": "install", "isntal": "install", "isntall": "install", "install-clean": "ci",
    "isntall-clean": "ci", "hlep": "help", "dist-tags": "dist-tag", "upgrade": "update",
    "udpate": "update", "rum": "run", "sit": "install-ci-test", "urn": "run", "ogr": "org",
    "add-user": "adduser",
}
_PNPM_ALIASES = {
    "i": "install", "up": "update", "upgrade": "update", "rm": "remove", "uninstall": "remove",
    "un": "remove", "ln": "link", "ls": "list", "ll": "list", "la": "list", "t": "test",
    "tst": "test", "rb": "rebuild", "it": "install-test", "dedupe": "dedupe", "x": "dlx",
}
_BUN_ALIASES = {"i": "install", "a": "add", "rm": "remove", "x": "x", "r": "remove", "c": "create"}
_YARN_ALIASES = {"i": "install"}


def _npm_word(word: str) -> set[str]:
    word = word.lower()
    if word in _NPM_COMMANDS:
        return {word}
    if word in _NPM_ALIASES:
        return {_NPM_ALIASES[word]}
    matches = {c for c in _NPM_COMMANDS if c.startswith(word)}
    matches |= {target for alias, target in _NPM_ALIASES.items() if alias.startswith(word)}
    return matches or {word}


_RESOLVERS: dict[str, Callable[[str], set[str]]] = {
    "npm": _npm_word,
    "pnpm": lambda word: {_PNPM_ALIASES.get(word, word)},
    "bun": lambda word: {_BUN_ALIASES.get(word, word)},
    "yarn": lambda word: {_YARN_ALIASES.get(word, word)},
}


def _command_positions(argv: tuple[Word, ...]) -> list[int]:
    """Where the command word may be: the first operand, and the next one too when the first
    may be the value of an option written without ``=`` (``npm --prefix dir publish``)."""
    positions: list[int] = []
    after_option = False
    for i, word in enumerate(argv[1:], start=1):
        if isinstance(word, Dynamic):
            positions.append(i)
            if not after_option:
                break
            after_option = False
            continue
        if word == "--":
            break
        if word.startswith("-"):
            after_option = "=" not in word
            continue
        positions.append(i)
        if not after_option:
            break
        after_option = False
    return positions


def _uv_installs(argv: tuple[Word, ...]) -> list[tuple[Word, ...]]:
    """``uv run --with X …`` (and ``--with-requirements``, ``--with-editable``) installs X into
    the run's environment: it is also an install, as ``uv pip install X`` spells it."""
    if len(argv) < 2 or argv[1] != "run":
        return []
    wanted = [w for w in argv[2:] if isinstance(w, Dynamic) or w.startswith("--with")]
    return [("uv", "pip", "install", *wanted)] if wanted else []


def spellings(argv: tuple[Word, ...]) -> list[tuple[Word, ...]]:
    """Every argv ``argv`` may stand for: one per command its command word may mean (argv
    itself for programs this module does not know, and for words computed at run time)."""
    name = argv[0] if argv else None
    if name == "uv":
        return [argv, *_uv_installs(argv)]
    if not isinstance(name, str) or name not in _RESOLVERS:
        return [argv]
    resolve = _RESOLVERS[name]
    positions = _command_positions(argv)
    if not positions and name == "yarn":
        return [(*argv, "install")]  # bare `yarn` installs
    out: list[tuple[Word, ...]] = []
    for i in positions:
        word = argv[i]
        if isinstance(word, Dynamic):
            out.append(argv)
            continue
        for command in sorted(resolve(word)):
            # the command word moved right behind the program, options after it, as the rules
            # are written (`npm publish …`)
            out.append((name, command, *argv[1:i], *argv[i + 1:]))
    return out or [argv]
