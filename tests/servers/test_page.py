"""The search page in headless Chromium (Debian's chromium + chromium-driver, driven by Selenium):
a search typed and submitted, results rendered with their snippets, a result opened with its
timeline, the search kept in the URL; on a database of their own, the live recent view (a row the
agent writes shows within 5 s of its sync), the project list, the keyboard, the record panel's
labels, and a memory holding HTML shown as text. Screenshots go to ``test-artifacts/``; the ones
in ``docs/images/`` are copies of them."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memsync.config.settings import Settings
from tests.conftest import free_port
from tests.search.test_search import o
from tests.servers.conftest import ROOT, HttpServer, corpus

pytestmark = pytest.mark.slow
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
# Astral characters before the words: the page must slice the highlights by code point, as they count.
HOSTILE = "<img src=x onerror=window.__pwned=1> 🎉𠀀 broke the avatar preview <b>markup</b>"
LIVE_S = 5  # a row synced shows in the open recent view within this


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Chromium for the module (each test opens its own page)."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        if os.environ.get("MEMSYNC_REQUIRE_BROWSER"):
            pytest.fail("chromium and chromedriver are required here (apt-get install chromium chromium-driver)")
        pytest.skip("chromium/chromedriver not installed (apt-get install chromium chromium-driver); CI installs them")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # Flags for a closed network and a root user: no sandbox, no background fetches.
    profile = tmp_path_factory.mktemp("chromium") / "profile"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", "--window-size=1280,900", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, HttpServer]]:
    """A database of this module's own (the shared corpus plus a memory holding HTML), synced into
    its own managed Chroma, served: the live test writes to it."""
    from memsync.chroma.server import ManagedServer
    from memsync.worker.pipeline.resync import resync
    from tests.upstream.written import written_db

    tmp = tmp_path_factory.mktemp("page")
    settings = Settings(db=tmp / "claude-mem.db", data_dir=tmp / "data", chroma_mode="managed",
                        chroma_port=free_port())
    written_db(settings.db, [*corpus(), o(HOSTILE, 0.5, project="beta", title="Avatar preview <b>markup</b>",
                                          type="bugfix")])
    owner = ManagedServer(settings)
    owner.ensure()
    try:
        resync(settings)
        with HttpServer(settings) as server:
            yield settings, server
    finally:
        owner.stop()


def shot(browser: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    assert browser.save_screenshot(str(path)) and path.stat().st_size > 10_000
    return path


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
    wait.until(lambda d: "q=upload" in (d.find_element(By.ID, "results").get_attribute("data-query") or ""))
    cards = browser.find_elements(By.CSS_SELECTOR, ".result")
    assert cards and browser.find_element(By.ID, "meta").text.startswith("mode hybrid")
    first = cards[0].text
    assert any(s in first for s in ("both", "semantic", "lexical")) and ("#" in first)
    marks = [m.text.lower() for m in browser.find_elements(By.CSS_SELECTOR, ".result .snippet mark")]
    assert marks and all(m.startswith(("upload", "retr")) for m in marks), marks
    answer = httpx.get(http_server.url + "/api/search", params={"q": "upload retries", "window_days": "0"},
                       timeout=30).json()
    below = answer.get("below_cutoff", answer.get("cutoff", {}).get("below", 0))
    assert browser.find_element(By.ID, "cutoff").is_displayed() is (below > 0)
    if below:  # "N below the cutoff — show all" asks again with all=true
        assert browser.find_element(By.ID, "cutoff").text == f"{below} below the cutoff — show all"
        browser.find_element(By.ID, "show-all").click()
        wait.until(lambda d: "all=true" in (d.find_element(By.ID, "results").get_attribute("data-query") or ""))
        assert len(browser.find_elements(By.CSS_SELECTOR, ".result")) == len(cards) + below
        cards = browser.find_elements(By.CSS_SELECTOR, ".result")

    cards[0].click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "detail"), "Timeline"))
    detail = browser.find_element(By.ID, "detail").text
    assert "Project" in detail and browser.find_elements(By.CSS_SELECTOR, ".tl.anchor")
    shot(browser, "page-search.png")


def test_the_search_lives_in_the_url(http_server: HttpServer, browser: Any) -> None:
    # Bookmark, share, reload, back: the form and the results follow the URL.
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


def test_a_memory_holding_html_shows_as_text(own: tuple[Settings, HttpServer], browser: Any) -> None:
    """Title and snippet of a row holding ``<img onerror>`` and ``<b>``: text on the page, no element, no
    script run; the marks fall on the query's words past an emoji and an astral CJK character."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _, server = own
    browser.get(server.url + "/?q=avatar+preview&window=0")
    WebDriverWait(browser, 30).until(
        lambda d: d.find_element(By.ID, "results").get_attribute("data-count") not in (None, "", "0"))
    card = next(c for c in browser.find_elements(By.CSS_SELECTOR, ".result") if "avatar" in c.text)
    assert "Avatar preview <b>markup</b>" in card.text
    assert "<img src=x onerror=window.__pwned=1>" in card.find_element(By.CSS_SELECTOR, ".snippet").text
    assert [m.text.lower() for m in card.find_elements(By.CSS_SELECTOR, "mark")] == ["avatar", "preview"]
    assert browser.find_elements(By.CSS_SELECTOR, "img, #results b") == []
    assert browser.execute_script("return window.__pwned === undefined")


def test_the_recent_view_is_live_and_projects_filter_it(own: tuple[Settings, HttpServer], browser: Any) -> None:
    """No query: the newest rows; a row the agent writes shows within LIVE_S of the worker's sync;
    the project list carries the database's counts and a click filters the view."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from memsync.worker.loop.daemon import Worker

    settings, server = own
    wait = WebDriverWait(browser, 30)
    browser.get(server.url + "/")
    wait.until(lambda d: "order=newest" in (d.find_element(By.ID, "results").get_attribute("data-query") or ""))
    assert browser.find_element(By.ID, "meta").text.startswith("Recent · live")
    first = browser.find_elements(By.CSS_SELECTOR, ".result")[0]
    assert first.get_attribute("data-id") and "avatar" in first.text.lower()  # half a day old: the newest

    # claude-mem writing a new observation into this test's own database, in an existing session
    now = int(time.time() * 1000)
    conn = sqlite3.connect(settings.db)
    try:
        with conn:
            session = conn.execute("SELECT memory_session_id FROM sdk_sessions WHERE project = 'alpha' "
                                   "ORDER BY id DESC LIMIT 1").fetchone()[0]
            new_id = conn.execute(
                "INSERT INTO observations (memory_session_id, project, type, title, narrative, facts, concepts, "
                "files_read, files_modified, prompt_number, created_at, created_at_epoch) "
                "VALUES (?, 'alpha', 'discovery', 'Live feed arrival', 'The cache warms itself on start.', '[]', "
                "'[]', '[]', '[]', 1, ?, ?)",
                (session, time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now / 1000)), now)).lastrowid
    finally:
        conn.close()
    Worker(settings).once()
    synced = time.monotonic()
    WebDriverWait(browser, LIVE_S).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, f'.result[data-kind="observation"][data-id="{new_id}"]'))
    assert time.monotonic() - synced < LIVE_S
    assert "Live feed arrival" in browser.find_elements(By.CSS_SELECTOR, ".result")[0].text
    wait.until(lambda d: d.find_element(By.ID, "projects").get_attribute("data-loaded") == "1")
    shot(browser, "page-recent.png")

    counts = {p["project"]: p["count"] for p in httpx.get(server.url + "/api/projects", timeout=10).json()}
    beta = browser.find_element(By.CSS_SELECTOR, '.proj[data-project="beta"]')
    assert beta.text.split() == ["beta", str(counts["beta"])]
    beta.click()
    wait.until(lambda d: "project=beta" in (d.find_element(By.ID, "results").get_attribute("data-query") or ""))
    cards = browser.find_elements(By.CSS_SELECTOR, ".result")
    assert cards and all("beta" in c.text for c in cards)
    assert "project=beta" in browser.current_url


def test_the_keyboard_and_the_record_panel(own: tuple[Settings, HttpServer], browser: Any) -> None:
    """/ focuses the search, the arrows select, Enter opens; the panel says Session, Recorded,
    Project, Type, Files read, the raw column names only behind the toggle."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    _, server = own
    wait = WebDriverWait(browser, 30)
    browser.get(server.url + "/?window=0")
    wait.until(lambda d: "order=newest" in (d.find_element(By.ID, "results").get_attribute("data-query") or ""))
    browser.execute_script("document.activeElement.blur()")
    keys = ActionChains(browser)
    keys.send_keys("/").perform()
    assert browser.switch_to.active_element.get_attribute("id") == "q"
    keys.send_keys("upload retries" + Keys.ENTER).perform()
    wait.until(lambda d: "q=upload" in (d.find_element(By.ID, "results").get_attribute("data-query") or ""))
    cards = browser.find_elements(By.CSS_SELECTOR, ".result")
    assert len(cards) >= 2
    keys.send_keys(Keys.ARROW_DOWN, Keys.ARROW_DOWN, Keys.ARROW_UP, Keys.ARROW_DOWN).perform()
    selected = browser.find_elements(By.CSS_SELECTOR, ".result.selected")
    assert [c.get_attribute("data-key") for c in selected] == [cards[1].get_attribute("data-key")]
    keys.send_keys(Keys.ENTER).perform()
    ref = cards[1].find_element(By.CSS_SELECTOR, ".ref").text
    wait.until(lambda d: d.find_element(By.ID, "detail").get_attribute("data-open") == ref)

    detail = browser.find_element(By.ID, "detail")
    labels = [dt.text for dt in detail.find_elements(By.CSS_SELECTOR, "dl.human dt")]
    assert {"Project", "Recorded"} <= set(labels) and ("Session" in labels or "Prompt" in labels), labels
    if cards[1].get_attribute("data-kind") == "observation":
        assert {"Type", "Files read"} <= set(labels)
    for raw in ("memory_session_id", "created_at_epoch"):
        assert raw not in detail.text  # hidden behind the toggle
    # Enter on the focused toggle opens it: the list's Enter does not take it over (reopening the record)
    browser.execute_script("document.querySelector('#raw summary').focus()")
    keys.send_keys(Keys.ENTER).perform()
    wait.until(lambda d: d.find_element(By.ID, "raw").get_attribute("open") is not None)
    assert "created_at_epoch" in browser.find_element(By.ID, "detail").text
    shot(browser, "page-record.png")


def test_a_slow_listing_is_waited_for_not_asked_again(own: tuple[Settings, HttpServer], browser: Any) -> None:
    """When the newest rows take longer than a live tick to come, the next tick waits for them:
    requests piling up, each answer dropped for a newer request, would freeze the recent view."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _, server = own
    browser.get(server.url + "/?window=0")
    WebDriverWait(browser, 30).until(
        lambda d: "order=newest" in (d.find_element(By.ID, "results").get_attribute("data-query") or ""))
    # Each listing answers 3 s late (longer than a 2 s tick); count how many are open at once.
    browser.execute_script("""
      const real = window.fetch, seen = window.__live = { open: 0, most: 0, done: 0 };
      window.fetch = async (...args) => {
        if (!String(args[0]).includes("order=newest")) return real(...args);
        seen.open++; seen.most = Math.max(seen.most, seen.open);
        try { await new Promise((done) => setTimeout(done, 3000)); return await real(...args); }
        finally { seen.open--; seen.done++; }
      };""")
    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return window.__live.done") >= 1)
    assert browser.execute_script("return window.__live.most") == 1
