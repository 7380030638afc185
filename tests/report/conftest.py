"""Fixtures: one realistic run (tests.report.scenario) recorded once per session, its report,
and a Chromium page that fails the test on any request leaving the report."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from executor.report import write_report
from tests.report.scenario import Scenario, record

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="session")
def scenario(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    if shutil.which(CHROMIUM) is None:
        pytest.skip("Chromium is not installed (run scripts/bootstrap)")
    return asyncio.run(record(tmp_path_factory.mktemp("report-scenario")))


@pytest.fixture(scope="session")
def report(scenario: Scenario) -> Path:
    return write_report(scenario.folder)


@dataclass
class Opened:
    """A report open in Chromium, with every request the page tried to make."""

    page: Any
    url: str
    requests: list[str] = field(default_factory=list)
    routed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def left_the_page(self) -> list[str]:
        return [u for u in self.requests if u != self.url] + self.routed


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if shutil.which(CHROMIUM) is None:
        pytest.skip("Chromium is not installed (run scripts/bootstrap)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        yield browser
        browser.close()


def open_report(browser: Any, path: Path, *, width: int = 1280, height: int = 900) -> Opened:
    """Open ``path`` from the file system; every request but the report itself is recorded and
    refused (route), and every request the page makes is seen (the request event)."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    opened = Opened(page, path.resolve().as_uri())

    def refuse(route: Any) -> None:
        if route.request.url == opened.url:
            route.continue_()
        else:
            opened.routed.append(route.request.url)
            route.abort()

    context.route("**/*", refuse)
    page.on("request", lambda request: opened.requests.append(request.url))
    page.on("console", lambda msg: opened.errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: opened.errors.append(str(exc)))
    page.goto(opened.url, wait_until="load")
    return opened
