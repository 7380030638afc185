"""A :class:`~executor.report.model.Run` as one self-contained HTML file.

Self-contained means the page fetches nothing, ever: the CSS and the script are inline, every
screenshot is inline at full size, once (a CSS rule per screenshot holds it as a ``data:`` URL;
each picture of it — the thumbnail after one call, the one the next call's actions are drawn
on, the full-size view — is an element of that class), and a Content-Security-Policy allows no
source but those inline blocks (by hash) and ``data:`` images. The file can be mailed, archived
beside the audit log, or opened from any folder.

Every piece of text that came from the model, a page, a command or a log goes through Jinja2's
autoescaping (``<script>`` in a command's output is shown, never run), after control characters
are made visible (:func:`sandloop.text.visible`), so a bidirectional override or an escape
sequence shows as what it is. The CSP is the second fence: even markup that slipped through
could run no script and load nothing.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path, PurePath
from typing import Any

import jinja2
from markupsafe import Markup
from PIL import Image as PILImage

from executor.report import marks
from executor.report.model import Run
from sandloop.text import visible

__all__ = ["Shot", "Text", "render", "text"]

#: a text longer than this is shown as its head and tail (the log keeps it whole)
TEXT_LIMIT = 200_000
#: lines shown before and after the fold of a long output
PREVIEW_LINES = 6
#: a run with more calls than this has its rows rendered as they come into view (report.css)
LAZY_ROWS = 150

#: what executor.audit names stored images; the type shown is the one the file's bytes say
_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif")
_MIME = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
_DROPPED = (
    re.compile(r"…\[(\d+) bytes, (\d+) lines dropped\]…"),  # the sandbox's cap (head and tail)
    re.compile(r"…\[(\d+) chars dropped\]…"),  # the call's max_output_length
)


@dataclass(frozen=True)
class Shot:
    """One screenshot as the page holds it: once, as a data URL, whatever number of places
    show it (after one call, before the next, full size)."""

    sha: str
    width: int
    height: int
    data_url: str


def _shot(folder: Path, sha: str, inline: bytes | None) -> Shot | None:
    data = inline
    if data is None:
        path = next((folder / f"{sha}{s}" for s in _SUFFIXES if (folder / f"{sha}{s}").is_file()), None)
        if path is None:
            return None
        data = path.read_bytes()
    try:
        with PILImage.open(io.BytesIO(data)) as image:  # the header only: no pixel is decoded
            width, height, kind = image.width, image.height, image.format
    except (OSError, ValueError):
        return None  # not an image: shown as missing
    mime = _MIME.get(kind or "")
    if mime is None:
        return None
    return Shot(sha, width, height, f"data:{mime};base64,{base64.b64encode(data).decode()}")


# -- text ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """A stream or a long value, ready to show: whole when short; else head, fold and tail, with
    the whole text behind a disclosure."""

    whole: str
    head: str
    tail: str
    lines: int
    folded: int  # lines between head and tail
    dropped: tuple[str, ...]  # what the sandbox or the call's limit cut, as said in the text

    @property
    def long(self) -> bool:
        return self.folded > 0


def text(value: str) -> Text:
    if len(value) > TEXT_LIMIT:
        half = TEXT_LIMIT // 2
        value = f"{value[:half]}\n…[{len(value) - TEXT_LIMIT} chars not shown in the report]…\n{value[-half:]}"
    dropped = []
    for match in _DROPPED[0].finditer(value):
        dropped.append(f"{int(match.group(1)):,} bytes ({int(match.group(2)):,} lines) dropped by the sandbox")
    for match in _DROPPED[1].finditer(value):
        dropped.append(f"{int(match.group(1)):,} chars cut to the call's max_output_length")
    lines = value.splitlines()
    if len(lines) <= 2 * PREVIEW_LINES + 2:
        return Text(value, value, "", len(lines), 0, tuple(dropped))
    return Text(value, "\n".join(lines[:PREVIEW_LINES]), "\n".join(lines[-PREVIEW_LINES:]),
                len(lines), len(lines) - 2 * PREVIEW_LINES, tuple(dropped))


# -- the template --------------------------------------------------------------------------


def _finalize(value: Any) -> Any:
    """Every ``{{ }}``: control characters made visible before escaping (Markup is ours)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value)
    return value


def _duration(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return ""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{int(value // 60)} min {value % 60:.0f} s"


def _source(value: str) -> str:
    """``/long/path/policy.toml:12`` as ``policy.toml:12`` (the full path is in the header and
    in the element's title)."""
    path, colon, line = value.rpartition(":")
    return f"{PurePath(path).name}:{line}" if colon and line.isdigit() else value


def _number(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "—" if value is None else str(value)


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("executor.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(duration=_duration, number=_number, source=_source, text=text, describe=marks.describe,
                       json=lambda v: json.dumps(v, indent=2, ensure_ascii=False))
    env.globals.update(overlay=marks.overlay, kind=lambda value: type(value).__name__)
    return env


@cache
def _asset(name: str) -> str:
    return resources.files("executor.report").joinpath("assets", name).read_text(encoding="utf-8")


def _csp_hash(content: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(content.encode()).digest()).decode() + "'"


def render(run: Run) -> str:
    """The report of ``run`` as one HTML document."""
    shots = {sha: shot for sha in run.screenshots()
             if (shot := _shot(run.files.screenshots, sha, run.images.get(sha)))}
    css, script = _asset("report.css"), _asset("report.js")
    # One rule per screenshot, used by every picture of it. Base64 and hex digits only: nothing
    # here can close the block.
    pictures = "".join(f".t-{s.sha}{{background-image:url({s.data_url})}}" for s in shots.values())
    policy = "; ".join([
        "default-src 'none'",
        f"style-src {_csp_hash(css)} {_csp_hash(pictures)}",
        f"script-src {_csp_hash(script)}",
        "img-src data:",
        "base-uri 'none'",
        "form-action 'none'",
    ])
    template = _environment().get_template("report.html.j2")
    return template.render(run=run, shots=shots, css=Markup(css), pictures=Markup(pictures),
                           script=Markup(script), csp=policy, lazy=len(run.calls) > LAZY_ROWS)
