"""Debian's Chromium under chromedriver, headless, for the console's browser tests (no browser download)."""

from __future__ import annotations

import os
import shutil
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
INSTALLED = os.access(CHROMIUM, os.X_OK) and os.access(DRIVER, os.X_OK)
NOT_INSTALLED = "Debian's chromium and chromium-driver are not installed (make promtool installs them)"


def start(width: int, height: int, page_load_timeout_s: float) -> Any:
    """A WebDriver on a new headless Chromium of that window size; the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    driver.set_page_load_timeout(page_load_timeout_s)
    return driver
