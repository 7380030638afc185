"""``sandloop mcp``: serve the sandbox's tools to MCP clients (Claude Desktop, Codex, Cursor, the
OpenAI Agents SDK …) over stdio, or over Streamable HTTP on loopback.

Registering the command imports nothing but argparse; the MCP SDK is imported when the command
runs, and a missing ``sandloop[mcp]`` extra is one line saying how to install it.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from sandloop.errors import ConfigError

__all__ = ["register", "run"]

_SDK_MODULES = ("mcp", "mcp_types", "uvicorn", "jsonschema")


def run(args: argparse.Namespace) -> int:
    """Serve until the client goes away (stdio) or the server is interrupted (HTTP)."""
    repo = Path(args.repo)
    if not repo.is_dir():
        raise ConfigError(f"--repo {args.repo} is not a directory")
    try:
        from executor.mcp import server
        from executor.mcp.session import ServeOptions
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in _SDK_MODULES:
            raise ConfigError("sandloop mcp needs the MCP SDK: pip install 'sandloop[mcp]'") from None
        raise
    options = ServeOptions(repo=repo.resolve(), policy=args.policy, browser=args.browser, backend=args.backend,
                           image=args.image)
    try:
        if args.http is None:
            asyncio.run(server.serve_stdio(options))
        else:
            from executor.mcp import http

            bind = http.parse_bind(args.http, allow_remote=args.allow_remote)
            asyncio.run(http.serve_http(options, bind, idle_timeout_s=args.idle_timeout))
    except KeyboardInterrupt:
        pass
    return 0


def register(sub: Any) -> None:
    """Add the ``mcp`` subcommand to the ``sandloop`` command line."""
    p = sub.add_parser(
        "mcp", help="serve the sandbox's tools (shell, apply_patch, computer) to MCP clients",
        description="Serve sandloop's tools over the Model Context Protocol: stdio by default (how "
                    "clients launch servers), or Streamable HTTP with --http. Every MCP session gets "
                    "its own sandbox, removed when the session ends, and its own run folder "
                    "(sandloop report works on it).")
    p.add_argument("--repo", default=".", help="the checkout to work in (default: .)")
    p.add_argument("--policy", help="a policy file or preset name (default: the default preset)")
    p.add_argument("--browser", choices=("auto", "container", "local", "off"), default=None,
                   help="where Chromium runs for the computer tool (default: auto; the tool is offered "
                        "when the policy's [browser] rules allow some page). Under a policy with "
                        "[computer] environment = \"desktop\" the tool drives that desktop, and a "
                        "browser is refused")
    p.add_argument("--backend", help="what runs the sessions (default: the policy's [backend] type)")
    p.add_argument("--image", help="the image to start from, instead of the policy's [environment] one")
    p.add_argument("--http", metavar="HOST:PORT",
                   help="serve Streamable HTTP at http://HOST:PORT/mcp (loopback only; port 0 picks "
                        "one) with a bearer token printed once, instead of stdio")
    p.add_argument("--allow-remote", action="store_true",
                   help="with --http: allow a non-loopback address (the token is still required)")
    p.add_argument("--idle-timeout", type=float, default=600.0, metavar="S",
                   help="with --http: close a session, and remove its sandbox, after S seconds with no "
                        "request and no open stream (default: 600)")
    p.set_defaults(func=run)
