"""The search page in headless Chromium (Debian's chromium + chromium-driver, driven by Selenium):
a search typed and submitted, results rendered, a result opened with its timeline, a screenshot
saved to ``test-artifacts/``."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers.conftest import ROOT, HttpServer

pytestmark = pytest.mark.slow
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        if os.environ.get("MEMSYNC_REQUIRE_BROWSER"):
            pytest.fail("chromium and chromedriver are required here (apt-get install chromium chromium-driver)")
        pytest.skip("chromium/chromedriver not installed (apt-get install chromium chromium-driver); CI installs them")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # Flags for a closed network and a root user: no sandbox, no background fetches.
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", "--window-size=1280,900", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_search_in_the_page(http_server: HttpServer, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, 30)
    browser.get(http_server.url + "/")
    wait.until(lambda d: d.find_element(By.ID, "status").get_attribute("data-loaded") == "1")
    status = browser.find_element(By.ID, "status").text
    assert "worker down" in status and "vectors reachable" in status and "observations: 5 rows" in status

    box = browser.find_element(By.ID, "q")
    box.send_keys("upload retries")
    Select(browser.find_element(By.ID, "window")).select_by_value("0")
    browser.find_element(By.ID, "go").click()
    wait.until(lambda d: d.find_element(By.ID, "results").get_attribute("data-count") not in (None, "", "0"))
    cards = browser.find_elements(By.CSS_SELECTOR, ".result")
    assert cards and browser.find_element(By.ID, "meta").text.startswith("mode hybrid")
    first = cards[0].text
    assert any(s in first for s in ("both", "semantic", "lexical")) and ("#" in first)

    cards[0].click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "detail"), "Timeline"))
    detail = browser.find_element(By.ID, "detail").text
    assert "project" in detail and browser.find_elements(By.CSS_SELECTOR, ".tl.anchor")

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "page-search.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000


def test_the_search_lives_in_the_url(http_server: HttpServer, browser: Any) -> None:
    # Bookmark, share, reload, back: the form and the results follow the URL (issue 17).
    from urllib.parse import parse_qs, urlsplit

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, 30)

    def shown(query: str) -> list[str]:
        """The cards once the list shows ``query``'s answer."""
        wait.until(lambda d: f"q={query}" in (d.find_element(By.ID, "results").get_attribute("data-query") or ""))
        return [c.text for c in browser.find_elements(By.CSS_SELECTOR, ".result")]

    def url_state() -> dict[str, list[str]]:
        return parse_qs(urlsplit(browser.current_url).query)

    browser.get(http_server.url + "/")
    wait.until(lambda d: d.find_element(By.ID, "status").get_attribute("data-loaded") == "1")
    browser.find_element(By.ID, "q").send_keys("dashboard")
    Select(browser.find_element(By.ID, "project")).select_by_value("beta")
    Select(browser.find_element(By.ID, "window")).select_by_value("0")
    browser.find_element(By.ID, "go").click()
    beta = shown("dashboard")
    assert beta and all("beta" in card for card in beta)
    assert url_state() == {"q": ["dashboard"], "project": ["beta"], "window": ["0"]}
    bookmark = browser.current_url

    box = browser.find_element(By.ID, "q")
    box.clear()
    box.send_keys("uploads")
    Select(browser.find_element(By.ID, "kind")).select_by_value("prompts")
    browser.find_element(By.ID, "platform").send_keys("codex")  # no codex sessions here
    browser.find_element(By.ID, "go").click()
    assert shown("uploads") == [] and url_state()["platform"] == ["codex"] and url_state()["kind"] == ["prompts"]

    browser.back()  # the previous search, form and results
    assert shown("dashboard") == beta
    assert browser.find_element(By.ID, "q").get_attribute("value") == "dashboard"
    assert browser.find_element(By.ID, "platform").get_attribute("value") == ""
    assert Select(browser.find_element(By.ID, "kind")).first_selected_option.get_attribute("value") == "all"

    browser.get("about:blank")
    browser.get(bookmark)  # a reload or a shared link: the project is kept before the status lists it
    assert shown("dashboard") == beta
    assert Select(browser.find_element(By.ID, "project")).first_selected_option.get_attribute("value") == "beta"
    assert Select(browser.find_element(By.ID, "window")).first_selected_option.get_attribute("value") == "0"
