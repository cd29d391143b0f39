"""The dashboard in a real browser (Debian's headless Chromium, driven by Playwright): it asks for the token,
takes a job file, and shows the jobs appear, run on the cluster's GPUs and progress. Nothing is fetched
from anywhere but the server."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright

CHROMIUM = os.environ.get("HADAR_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
JOBS = "jobs:\n  - {job_type: lstm, total_steps: 750}\n  - {job_type: recoder, total_steps: 1500}\n"


def _progress(page: Page) -> dict[int, tuple[str, float]]:
    rows = page.locator("#jobs tbody tr")
    out = {}
    for i in range(rows.count()):
        row = rows.nth(i)
        progress = float(row.locator("td.progress").get_attribute("data-progress") or 0)
        out[int(row.get_attribute("data-job-id") or -1)] = (row.get_attribute("data-status") or "", progress)
    return out


def _until(cond, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


@pytest.mark.runtime
def test_dashboard_shows_submitted_jobs_running_and_progressing(server_factory, tmp_path: Path):
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} missing: apt-get install -y chromium (make test does)"
    server = server_factory("--round-s", "3").start()
    url, token = server.client().url, server.client().token
    outside: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(url) else None)
            page.goto(url + "/")
            assert page.locator("#token-form").is_visible() and not page.locator("#app").is_visible()
            page.fill("#token", "not-the-token")
            page.click("#token-button")
            page.wait_for_selector("#token-error:has-text('wrong token')")
            page.fill("#token", token)
            page.click("#token-button")
            page.wait_for_selector(".node[data-node='node-v100']")
            assert page.locator(".node").count() == 3 and page.locator(".gpu").count() == 4

            page.fill("#submit-text", JOBS)
            page.click("#submit-button")
            page.wait_for_selector("#submit-result:has-text('submitted: job')")
            _until(lambda: len(_progress(page)) == 2, 30, "both jobs to appear")

            _until(lambda: all(p > 0 for _, p in _progress(page).values()), 120, "both jobs to make progress")
            first = _progress(page)
            page.wait_for_selector(".gpu.busy")  # a GPU shows the job it holds
            _until(lambda: any(p > first[j][1] or s == "done" for j, (s, p) in _progress(page).items()), 60,
                   "the page to show more progress")
            assert page.locator("#utilization polyline").count() == 1
            assert page.locator("#timeline rect").count() > 0
            assert "running" in page.locator("#status-line").inner_text()
            _until(lambda: all(s == "done" for s, _ in _progress(page).values()), 300, "both jobs to finish")
            assert all(p == 1.0 for _, p in _progress(page).values())
            page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        finally:
            browser.close()
    assert not outside, f"the dashboard requested something from elsewhere: {outside[:3]}"
