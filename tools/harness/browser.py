"""Debian's headless Chromium driven by Selenium through Debian's chromedriver, for the console's browser test."""

from __future__ import annotations

import importlib.util
import shutil
from typing import Any

__all__ = ["headless_chromium", "missing"]

CHROMIUM = "chromium"
CHROMEDRIVER = "chromedriver"


def missing() -> str:
    """What this machine lacks to drive a browser, in words; empty when nothing."""
    lacking = [name for name in (CHROMIUM, CHROMEDRIVER) if shutil.which(name) is None]
    if lacking:
        return f"{' and '.join(lacking)} missing: `make setup` installs Debian's chromium and chromium-driver"
    if importlib.util.find_spec("selenium") is None:
        return "selenium is missing: `make setup` installs requirements.txt"
    return ""


def headless_chromium(width: int = 1280, height: int = 1000) -> Any:
    """A Selenium ``webdriver.Chrome`` on a headless Chromium with a window of ``width`` x ``height``; quit it when
    done. Debian's chromedriver is named, so Selenium Manager never tries to download a driver or a browser."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which(CHROMIUM) or CHROMIUM
    # --no-sandbox: the tests may run as root (CI, a container), where Chromium's sandbox refuses to start.
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={width},{height}", "--hide-scrollbars"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(shutil.which(CHROMEDRIVER) or CHROMEDRIVER))
