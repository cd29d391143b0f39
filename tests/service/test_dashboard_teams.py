"""The dashboard's team view in headless Chromium (as ``test_dashboard.py`` drives it): under
``hadar serve --tenants`` an admin sees every team's quota, GPUs in use, borrowed GPUs and waiting jobs;
a user's token shows their own team's row and jobs only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright

from tests.service.conftest import write
from tests.service.test_dashboard import CHROMIUM, FLAGS, _until

TENANTS = """teams:
  vision: {weight: 2, quota: {v100: 1}, borrow: true}
  nlp:    {weight: 1, quota: {p100: 1}}
users:
  vis1: {team: vision}
  nlp1: {team: nlp}
"""


def _token(state: Path, user: str) -> str:
    out = subprocess.run([sys.executable, "-m", "hadar.cli", "token", "create", user, "--state", str(state)],
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip()


def _teams(page: Page) -> dict[str, dict[str, str]]:
    rows = page.locator("#teams tbody tr")
    out = {}
    for i in range(rows.count()):
        row = rows.nth(i)
        out[row.get_attribute("data-team") or ""] = {c: row.locator(f"td.{c}").inner_text()
                                                     for c in ("quota", "in-use", "borrowed", "running", "waiting")}
    return out


def _login(page: Page, url: str, token: str) -> None:
    page.goto(url + "/")
    page.evaluate("sessionStorage.clear()")
    page.goto(url + "/")
    page.fill("#token", token)
    page.click("#token-button")


@pytest.mark.runtime
def test_the_team_view_shows_quota_use_borrowing_and_waiting(server_factory, tmp_path: Path):
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} missing: apt-get install -y chromium (.ci/run does)"
    tenants = write(tmp_path / "tenants.yaml", TENANTS)
    server = server_factory("--tenants", str(tenants), "--cluster", "v100=2,p100=1", "--policy", "fifo_perf",
                            "--round-s", "2", "--min-run-s", "600").start()
    tokens = {u: _token(server.state, u) for u in ("vis1", "nlp1")}
    from hadar.service.client import Client

    url = server.client().url
    long_job = {"job_type": "lstm", "total_steps": 100000}
    Client(url, tokens["vis1"]).request("POST", "/api/jobs", {"jobs": [long_job] * 3})
    server.wait_for(lambda: sum(j["status"] == "running" for j in server.jobs().values()) == 3, 120,
                    "the vision jobs to run on every GPU, two of them borrowed")
    Client(url, tokens["nlp1"]).request("POST", "/api/jobs", {"jobs": [{"job_type": "lstm", "total_steps": 100}]})
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            _login(page, url, server.client().token)
            page.wait_for_selector("#teams tbody tr[data-team='vision']")
            _until(lambda: _teams(page).get("nlp", {}).get("waiting") == "1", 30, "nlp's waiting job")
            view = _teams(page)  # the borrowers keep the GPUs for --min-run-s: nlp's job waits
            assert view["vision"] == {"quota": "v100 1 (borrows)", "in-use": "p100 1, v100 2",
                                      "borrowed": "p100 1, v100 1", "running": "3", "waiting": "0"}
            assert view["nlp"] == {"quota": "p100 1", "in-use": "-", "borrowed": "-", "running": "0", "waiting": "1"}
            _login(page, url, tokens["nlp1"])
            page.wait_for_selector("#teams tbody tr[data-team='nlp']")
            _until(lambda: "nlp1 (nlp)" in page.locator("#status-line").inner_text(), 30, "the user in the header")
            assert list(_teams(page)) == ["nlp"]
            _until(lambda: page.locator("#jobs tbody tr").count() == 1, 30, "nlp's job")  # none of vision's
            page.screenshot(path=str(tmp_path / "teams.png"), full_page=True)
        finally:
            browser.close()
