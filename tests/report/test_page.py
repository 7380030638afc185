"""The report of a real run, opened from the file system in real Chromium: what a person sees,
what the filters do, that nothing leaves the page, and that hostile text stays text."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from executor.report import load_run
from executor.report.model import Call, ComputerView, Run, ShellView
from tests.report.conftest import Opened, open_report
from tests.report.scenario import CLICK, HOSTILE, Scenario

pytestmark = [pytest.mark.docker, pytest.mark.browser]

DOCS_SHOT = Path(__file__).resolve().parents[2] / "docs" / "report.png"


@pytest.fixture(scope="module")
def run(scenario: Scenario) -> Run:
    return load_run(scenario.folder)


@pytest.fixture
def opened(report: Path, chromium: Any) -> Any:
    opened = open_report(chromium, report)
    yield opened
    opened.page.context.close()


def shown(locator: Any) -> str:
    """The text a person sees there: rows far from the view are not rendered until scrolled to
    (content-visibility), so scroll first, then read what is rendered."""
    locator.scroll_into_view_if_needed()
    # the rendering update after the scroll is the one that renders the rows now in view
    locator.evaluate("e => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    return str(locator.inner_text())


def call_of(run: Run, summary: str) -> Call:
    (call,) = [c for c in run.calls if c.summary == summary]
    return call


def test_one_row_per_call_with_its_decisions(opened: Opened, run: Run) -> None:
    page = opened.page
    rows = page.locator("article.call")
    assert rows.count() == len(run.calls) == 15
    assert [rows.nth(i).get_attribute("data-type") for i in range(rows.count())] == \
        [c.type for c in run.calls]
    curl = page.locator(f"#call-{call_of(run, 'curl http://127.0.0.1:9/').call_id}")
    assert shown(curl.locator(".policy .rule")) == "no-curl"
    assert "policy.toml:" in shown(curl.locator(".policy .src"))
    assert "no network tools in this sandbox" in shown(curl.locator(".policy .why"))
    assert "exit 126" in shown(curl.locator(".cmd"))
    approved = page.locator(f"#call-{call_of(run, 'rm old.txt').call_id} .policy")
    assert shown(approved.locator(".rule")) == "rm-asks"
    assert "prompted" in shown(approved)
    assert "decided by: approved by callback" in shown(approved)
    header = shown(page.locator("header"))
    assert "verified" in shown(page.locator("#audit"))
    assert "answered, code 0" in header
    counts = run.decision_counts()
    assert f"{counts['denied']} denied" in header and f"{counts['prompted']} prompted" in header


def test_the_diff_is_coloured_per_line(opened: Opened, run: Run) -> None:
    patch = opened.page.locator(f"#call-{call_of(run, 'update_file a.txt').call_id}")
    assert patch.locator(".diff .del").all_inner_texts() == ["-one\n"]
    assert patch.locator(".diff .add").all_inner_texts() == ["+two\n", "+three\n"]
    added = patch.locator(".diff .add").first.evaluate("e => getComputedStyle(e).backgroundColor")
    removed = patch.locator(".diff .del").first.evaluate("e => getComputedStyle(e).backgroundColor")
    assert added != removed and "rgba(0, 0, 0, 0)" not in (added, removed)
    assert "completed" in shown(patch.locator(".outcome"))
    locked = opened.page.locator(f"#call-{call_of(run, 'update_file locked/x.txt').call_id}")
    assert "read-only" in shown(locked.locator(".outcome"))


def test_the_click_is_drawn_where_it_happened_on_the_screenshot_before(opened: Opened, run: Run) -> None:
    clicking = call_of(run, "click, type, keypress")
    assert isinstance(clicking.view, ComputerView)
    (earlier,) = [c for c in run.calls if c.type == "computer_call" and c.summary == "screenshot"]
    assert isinstance(earlier.view, ComputerView)
    assert clicking.view.before == earlier.view.after is not None  # the screenshot it applied to
    before = opened.page.locator(f"#call-{clicking.call_id} figure.shot").first
    assert before.get_attribute("data-sha") == clicking.view.before
    shown(before)  # rendered: in view
    svg = before.locator("svg.marks")
    background = svg.evaluate("e => getComputedStyle(e).backgroundImage")
    assert background.startswith('url("data:image/png;base64,')
    # The circle lies over the click point, in the picture's own proportions.
    box, frame = svg.locator("circle.click").first.bounding_box(), svg.bounding_box()
    assert box is not None and frame is not None
    scale = frame["width"] / 1280
    centre = (box["x"] + box["width"] / 2 - frame["x"], box["y"] + box["height"] / 2 - frame["y"])
    assert abs(centre[0] - CLICK[0] * scale) < 2 and abs(centre[1] - CLICK[1] * scale) < 2
    text = svg.text_content() or ""
    assert "ENTER" in text and "type hello" in text

    before.click()  # opens full size, with the same marks
    dialog = opened.page.locator("dialog#full")
    assert dialog.evaluate("d => d.open")
    full = dialog.locator("svg.marks")
    assert full.get_attribute("class") == svg.get_attribute("class")  # the same picture
    assert full.locator("circle.click:not(.dot)").count() == 1
    size = full.bounding_box()
    assert size is not None and size["width"] > 2 * frame["width"]
    assert abs(size["width"] / size["height"] - 1280 / 800) < 0.01
    natural = full.evaluate("""async e => {
        const url = getComputedStyle(e).backgroundImage.slice(5, -2), image = new Image();
        image.src = url; await image.decode(); return [image.naturalWidth, image.naturalHeight]; }""")
    assert natural == [1280, 800]
    opened.page.keyboard.press("Escape")
    assert not dialog.evaluate("d => d.open")


def visible_ids(opened: Opened) -> list[str]:
    return list(opened.page.locator("article.call:visible").evaluate_all("rows => rows.map(r => r.id.slice(5))"))


def test_filters_show_only_denials_errors_or_one_type(opened: Opened, run: Run) -> None:
    page = opened.page
    everything = [c.call_id for c in run.calls]
    page.click("button[data-flag=denied]")
    denied = [c.call_id for c in run.calls if c.denied]
    assert visible_ids(opened) == denied and len(denied) == 4  # curl, locked/x.txt, rm keep.txt, gh.delete_repo
    assert page.locator(".entry.message:visible").count() == 0  # only calls while filtering
    assert shown(page.locator("#shown")) == f"4 of {len(everything)} calls"
    page.click("button[data-flag=error]")
    errors = [c.call_id for c in run.calls if "error" in c.flags]
    assert visible_ids(opened) == errors
    # a refusal is not an error: the denied commands and patch are not here, the failed and timed out are
    assert [c.summary.split(" ")[0] for c in run.calls if c.call_id in errors] == [
        "3", "sleep", 'lookup({"query":']  # "3 commands": printf, seq, ls
    page.click("button[data-flag=all]")
    page.select_option("#type", "apply_patch_call")
    assert visible_ids(opened) == [c.call_id for c in run.calls if c.type == "apply_patch_call"]
    assert page.locator("section.turn:visible").count() == 1  # turns without one are hidden
    page.select_option("#type", "")
    assert visible_ids(opened) == everything
    assert page.locator(".entry.message:visible").count() == 2


def test_nothing_leaves_the_page(opened: Opened) -> None:
    page = opened.page
    csp = page.locator("meta[http-equiv=Content-Security-Policy]").get_attribute("content")
    assert csp is not None and "default-src 'none'" in csp and "img-src data:" in csp
    for figure in page.locator("figure.shot[data-sha]").all():  # every full-size image
        figure.click()
        page.keyboard.press("Escape")
    for summary in page.locator("details > summary").all():
        summary.click()
    page.click("button[data-flag=error]")
    assert opened.left_the_page() == []
    assert opened.requests == [opened.url]
    assert opened.errors == []  # nothing refused by the CSP: the page's own script ran


def test_hostile_text_is_shown_and_never_runs(opened: Opened, run: Run, scenario: Scenario) -> None:
    page = opened.page
    assert page.evaluate("typeof window.pwned") == "undefined"
    script = HOSTILE.split("<img")[0]
    printing = next(c for c in run.calls if isinstance(c.view, ShellView)
                    and c.view.commands[0].command.startswith("printf"))
    stdout = page.locator(f"#call-{printing.call_id} .stream.stdout pre").first
    assert shown(stdout).strip() == HOSTILE  # the command's output, as text
    assert script in shown(page.locator(".entry.message").first)  # the model's message
    navigate = [c for c in run.calls if c.type == "function_call" and c.summary.startswith("navigate")]
    title = shown(page.locator(f"#call-{navigate[0].call_id} .stream.output"))
    assert f"({HOSTILE})" in title  # the page's title, in the navigate tool's answer
    assert script in (page.locator("svg.marks .label.type").first.text_content() or "")  # typed text
    # No element came from the text: the page's one script is its own, and it has no img.
    assert page.locator("script:not([type])").count() == 1
    assert page.locator("img").count() == 0
    assert not page.locator("[onerror]").count()


def test_the_readme_screenshot(report: Path, chromium: Any, tmp_path: Path) -> None:
    """docs/report.png is taken here: written when missing or when SANDLOOP_UPDATE_DOCS=1 (so
    an ordinary test run leaves the committed file alone), checked every time."""
    opened = open_report(chromium, report, width=1200, height=1250)
    try:
        png = opened.page.screenshot()
    finally:
        opened.page.context.close()
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.size == (1200, 1250) and len(image.getcolors(1 << 20) or []) > 50  # not blank
    small = image.quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    target = DOCS_SHOT if os.environ.get("SANDLOOP_UPDATE_DOCS") == "1" or not DOCS_SHOT.exists() \
        else tmp_path / "report.png"
    small.save(target, optimize=True)
    assert target.stat().st_size < 400_000
