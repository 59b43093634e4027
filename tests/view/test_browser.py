"""`oracle view` in a real headless Chromium (the system's, driven by Selenium through the
system chromedriver): pages by content and by screenshots, and agent HTML left inert."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.view.conftest import Runs, Served

WIDTH, HEIGHT = 1280, 900
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _require_browser() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        message = (
            "needs chromium and chromedriver (`make system-deps` installs chromium and "
            f"chromium-driver): missing {', '.join(missing)}"
        )
        if os.environ.get("ORACLE_REQUIRE_SERVICES") == "1":
            pytest.fail(message + " and ORACLE_REQUIRE_SERVICES=1")
        pytest.skip(message)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    _require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # run as root in the test machine
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={WIDTH},{HEIGHT}",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    # The driver's path is given: Selenium never looks for (or downloads) one of its own.
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, path: Path) -> Any:
    """Save a PNG of the viewport at `path` and return it as a Pillow image (RGB), once its
    size is checked: the page's viewport, of the window's width."""
    from PIL import Image

    png = driver.get_screenshot_as_png()
    path.write_bytes(png)
    image = Image.open(io.BytesIO(png)).convert("RGB")
    inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
    assert image.size == tuple(inner), (image.size, inner)
    assert image.size[0] == WIDTH and image.size[1] > HEIGHT // 2
    return image


def colours(image: Any, box: tuple[int, int, int, int] | None = None) -> set[tuple[int, int, int]]:
    part = image.crop(box) if box else image
    return {c for _, c in part.getcolors(maxcolors=1 << 24)}


def follow(driver: Any, element: Any) -> None:
    """Click `element` and wait until the next page has replaced this one."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, 15).until(lambda d: _gone(old))
    WebDriverWait(driver, 15).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )


def _gone(element: Any) -> bool:
    """Whether `element` left the document. Asked mid-navigation, chromedriver answers either
    a stale reference or, now and then, an inspector error that the node "does not belong to
    the document": both mean it is gone."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


def no_alert(driver: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018  (asking is the check)


def test_a_trial_page_shows_the_changed_field_highlighted(
    runs: Runs, view: Served, browser: Any, tmp_path: Path
):
    from selenium.webdriver.common.by import By

    browser.get(view.url + "trial/0/demo/user-rename__obedient__none__default__r0")
    assert browser.find_element(By.ID, "cell").text == "user-rename/obedient/none/default/r0"
    verdicts = browser.find_element(By.CSS_SELECTOR, "table.verdicts").text
    assert "security (breached) yes" in verdicts and "utility yes" in verdicts
    changed = browser.find_elements(By.CSS_SELECTOR, "td.changed")
    assert sorted(c.text for c in changed) == ["bob → robert", "viewer → admin"]
    old = changed[0].find_element(By.CSS_SELECTOR, ".old")
    assert old.value_of_css_property("text-decoration-line") == "line-through"
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", changed[0])
    image = screenshot(browser, tmp_path / "trial.png")
    assert (tmp_path / "trial.png").stat().st_size > 10_000
    assert len(colours(image)) > 100  # text, tables, verdict colours: not a blank page
    rect = browser.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]",
        changed[0],
    )
    box = tuple(int(v) for v in rect)
    assert (255, 229, 143) in colours(image, box)  # the highlight of a changed field
    assert (255, 229, 143) not in colours(image, (0, 0, WIDTH, 40))  # and not in the header


def test_each_kind_of_change_is_rendered(runs: Runs, view: Served, browser: Any, tmp_path: Path):
    from selenium.webdriver.common.by import By

    browser.get(view.url + "trial/0/demo/log-level__obedient__none__default__r0")
    adds = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "pre.diff .add")]
    dels = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "pre.diff .del")]
    assert "+required = false" in adds and "-required = true" in dels
    diff = browser.find_element(By.CSS_SELECTOR, "pre.diff")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", diff)
    image = screenshot(browser, tmp_path / "file-diff.png")
    assert len(colours(image)) > 50
    rect = browser.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]",
        diff,
    )
    seen = colours(image, tuple(int(v) for v in rect))
    assert (215, 245, 221) in seen and (253, 226, 226) in seen  # added and removed lines

    browser.get(view.url + "trial/0/demo/mail-forward__obedient__none__default__r0")
    mail = browser.find_element(By.CSS_SELECTOR, "#sink-outbox .change-mail")
    assert "Subject" in mail.text and "Fwd:" in mail.text
    bodies = [e.text for e in mail.find_elements(By.CSS_SELECTOR, "pre.mail-body")]
    assert any("ACCT-5521-9907-XQ" in b for b in bodies)

    browser.get(view.url + "trial/0/demo/key-exfil__obedient__none__default__r0")
    requests = browser.find_elements(By.CSS_SELECTOR, ".change-request")
    assert any("POST" in r.text for r in requests)
    assert browser.find_elements(By.CSS_SELECTOR, "pre.request-body")
    finding = browser.find_element(By.CSS_SELECTOR, "ul.findings").text
    assert "scope" in finding


def test_redis_keys_are_rendered_with_changed_fields(runs: Runs, view: Served, browser: Any):
    from selenium.webdriver.common.by import By

    if not runs.redis:
        from tests.conftest import require_service

        require_service("Redis", 6379)
    browser.get(view.url + "trial/0/demo/redis-flags__obedient__none__default__r0")
    change = browser.find_element(By.CSS_SELECTOR, "#sink-cache .change-redis")
    assert "key flags (hash) changed" in change.text
    cells = change.find_elements(By.CSS_SELECTOR, "td.changed")
    assert sorted(c.text for c in cells) == ["off → on", "on → off"]


def test_agent_html_stays_inert(view: Served, browser: Any, tmp_path: Path):
    """A file name, a file's content and the agent's output that are HTML: shown as text, no
    script element or image made of them, no alert."""
    from selenium.webdriver.common.by import By

    browser.get(view.url + "run/0/hostile/")
    follow(browser, browser.find_element(By.CSS_SELECTOR, "a.trial-link"))
    no_alert(browser)
    assert browser.find_elements(By.TAG_NAME, "script") == []
    assert browser.find_elements(By.TAG_NAME, "img") == []
    page = browser.find_element(By.TAG_NAME, "main").text
    assert "<img src=x onerror=alert(5)>.txt" in page  # the file name, as text
    assert "<script>alert(1)</script><img src=x onerror=alert(2)>" in page  # its content
    assert browser.find_element(By.ID, "log-agent.stdout").text == "<script>alert(3)</script>"
    assert browser.find_element(By.ID, "log-agent.stderr").text == "<img src=x onerror=alert(4)>"
    assert "<script>alert(3)</script>" in browser.title  # the agent's name, as text
    image = screenshot(browser, tmp_path / "hostile.png")
    assert len(colours(image)) > 50
    no_alert(browser)


def test_filters_in_the_browser_are_shareable_links(runs: Runs, view: Served, browser: Any):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(view.url + "run/0/demo/")
    Select(browser.find_element(By.NAME, "agent")).select_by_visible_text("obedient")
    Select(browser.find_element(By.NAME, "security")).select_by_visible_text("true")
    follow(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"))
    assert "agent=obedient" in browser.current_url and "security=true" in browser.current_url
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.trial")
    assert len(rows) == (5 if runs.redis else 4)
    assert all("obedient" in r.text for r in rows)
    shared = browser.current_url
    browser.get(view.url)
    browser.get(shared)  # the same link, opened again, lists the same trials
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.trial")) == len(rows)


def test_a_report_rate_leads_to_its_trials(view: Served, browser: Any, tmp_path: Path):
    from selenium.webdriver.common.by import By

    browser.get(view.url + "report/2/m/")
    image = screenshot(browser, tmp_path / "report.png")
    assert len(colours(image)) > 50
    rate = browser.find_element(
        By.CSS_SELECTOR, 'table.tasks a.rate[href*="agent=obedient"][href*="task=user-rename"]'
    )
    follow(browser, rate)
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.trial")
    assert [r.find_element(By.TAG_NAME, "td").text for r in rows] == ["user-rename"]
    assert "obedient" in rows[0].text
    follow(browser, rows[0].find_element(By.CSS_SELECTOR, "a.trial-link"))
    assert browser.find_element(By.ID, "cell").text == "user-rename/obedient/none/default/r0"
    assert "signature" in browser.find_element(By.TAG_NAME, "main").text

    browser.get(view.url + "report/2/m/")
    browser.find_element(By.XPATH, "//table[@class='inputs']/ancestor::details/summary").click()
    follow(browser, browser.find_element(By.CSS_SELECTOR, "table.inputs a.trial"))
    assert browser.find_element(By.ID, "cell").text.startswith("user-rename/")


def test_a_trial_that_does_not_verify_shows_only_why(view: Served, browser: Any, tmp_path: Path):
    from selenium.webdriver.common.by import By

    from tests.view.conftest import MARK

    browser.get(view.url + "trial/0/tampered/user-rename__obedient__none__default__r0")
    box = browser.find_element(By.ID, "unverified")
    assert "record.json does not match its digest" in box.text
    assert MARK not in browser.page_source
    image = screenshot(browser, tmp_path / "unverified.png")
    assert (197, 48, 48) in colours(image)  # the red border of "does not verify"


def test_queue_messages_are_shown_as_text(runs: Runs, view: Served, browser: Any):
    from selenium.webdriver.common.by import By

    if not runs.queue:
        from tests.conftest import require_service

        require_service("RabbitMQ", 5672)
    browser.get(view.url + "run/0/queue/")
    follow(browser, browser.find_element(By.CSS_SELECTOR, "a.trial-link"))
    no_alert(browser)
    messages = browser.find_elements(By.CSS_SELECTOR, "#sink-bus .change-message")
    assert [m.find_element(By.CSS_SELECTOR, "pre.message-body").text for m in messages] == [
        "<script>alert(6)</script>",
        "<script>alert(6)</script>",
    ]
    assert "queue notes (waiting)" in messages[1].text
    assert "<b>me</b>" in messages[0].text
    assert browser.find_elements(By.TAG_NAME, "script") == []
    assert not any(b.text == "me" for b in browser.find_elements(By.CSS_SELECTOR, "main b"))


def test_model_usage_is_on_the_trial_page(view: Served, browser: Any, tmp_path: Path):
    from selenium.webdriver.common.by import By

    from tests.view.conftest import MODEL

    browser.get(view.url + "run/0/usage/")
    follow(browser, browser.find_element(By.CSS_SELECTOR, "a.trial-link"))
    usage = browser.find_element(By.ID, "usage").text
    assert "1 call(s)" in usage and MODEL in usage
    assert "1234 input tokens" in usage and "56 output tokens" in usage
    row = browser.find_element(By.CSS_SELECTOR, "table.model-calls tr:nth-child(2)").text
    assert "api.openai.test" in row and f"{MODEL} (gpt-x)" in row
    assert browser.find_elements(By.TAG_NAME, "img") == []
    no_alert(browser)
