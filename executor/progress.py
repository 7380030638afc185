"""Live progress on the terminal: turns, calls, policy decisions, outcomes and timings."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from rich.console import Console

from executor.terminal import shown

__all__ = ["Progress"]


class Progress:
    """Live progress on stderr: turns, calls, decisions, outcomes, timings."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._hosts_shown: set[str] = set()

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        c = self.console
        if kind == "turn_start":
            c.print(f"[bold]turn {data['turn']}[/]")
        elif kind == "response":
            u = data["usage"]
            c.print(f"  [dim]response {data['status']} in {data['request_s'] * 1000:.0f} ms, "
                    f"{u.total_tokens} tokens[/]")
        elif kind == "call_start":
            c.print(f"  → {data['type']} [cyan]{shown(data['summary'], one_line=True)}[/]", highlight=False)
            for part in data.get("parts") or ():
                # Separate commands with an exit code each: a list, one per line, never one
                # shell line (`a && b`, `a ; b`) they were not.
                c.print(f"      [cyan]$ {shown(part, one_line=True)}[/]", highlight=False)
        elif kind == "decision":
            if data["what"] == "url" and data["decision"] == "allow":
                # A page fetches dozens of resources: the first allowed one of each host is
                # shown, the rest are in the audit log.
                host = urlsplit(data["subject"]).netloc
                if host in self._hosts_shown:
                    return
                self._hosts_shown.add(host)
            colour = "green" if data["decision"] == "allow" else "red"
            subject = shown(data["subject"][:80], one_line=True)
            rule = shown(data.get("rule_id") or "default", one_line=True)
            c.print(f"    policy [{colour}]{data['decision']}[/] {data['what']} [dim]{subject} ({rule})[/]",
                    highlight=False)
        elif kind == "call_end":
            mark = "[green]✓[/]" if data["ok"] else "[red]✗[/]"
            c.print(f"  {mark} {data['type']} {shown(data['outcome'][:100], one_line=True)} "
                    f"[dim]({data['duration_s']:.2f} s)[/]", highlight=False)
        elif kind == "retry":
            c.print(f"  [yellow]incomplete: retrying with max_output_tokens="
                    f"{data['max_output_tokens']}[/]")
        elif kind == "waiting":
            c.print(f"  [dim]waiting for background calls {data['pending']}[/]")
        elif kind == "stop":
            c.print(f"[bold]stop[/]: {data['reason']} (exit {data['exit_code']})"
                    + (f" — {shown(data['detail'])}" if data.get("detail") else ""))
