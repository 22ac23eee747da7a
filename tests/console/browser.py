"""Debian's chromium, headless, driven by selenium through chromedriver: only test code.

The browser starts with a fresh profile and the flags that keep it from
talking to anything but the broker on loopback (no first-run, sync,
component updates or background networking, no QUIC). A machine without
chromium, chromedriver or selenium skips these tests with the reason
(``tools/run.sh test`` installs them).
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,1000")
WAIT_S = 20.0


def start_browser(profile_dir):
    """A new headless chromium (selenium WebDriver) with its own profile dir."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("chromium and chromium-driver are not installed (tools/run.sh test does)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_AVOID_STATS", "true")  # selenium's manager stays silent
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


def stop_browser(driver, profile_dir) -> None:
    try:
        driver.quit()
    finally:
        shutil.rmtree(profile_dir, ignore_errors=True)


def wait_for(check, what: str, timeout: float = WAIT_S):
    """``check()``'s first truthy value, polled; AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # noqa: BLE001 - the page is still drawing
            last = exc
        else:
            if last:
                return last
        time.sleep(0.1)
    raise AssertionError(f"{what} not seen within {timeout}s (last: {last!r})")


def table_rows(driver, table_id: str) -> list[list[str]]:
    """The text of each cell of each row of a table's body."""
    from selenium.webdriver.common.by import By

    return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")]


def message(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, "message").text
