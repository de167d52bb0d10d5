"""Headless Chromium (Selenium) for the report tests: open a file, check it rendered."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("SPOTTRAIN_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SPOTTRAIN_CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).parent / "artifacts"


def require_chromium() -> None:
    """Skip (with the reason) when the browser is missing; tools/install_test_deps.sh installs it."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (os.path.exists(p) or shutil.which(p))]
    if missing:
        pytest.skip(f"chromium not installed ({', '.join(missing)} missing); run tools/install_test_deps.sh")
    pytest.importorskip("selenium", reason="selenium not installed; pip install -e .[dev]")


def open_browser(user_data_dir: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", f"--user-data-dir={user_data_dir}", "--window-size=1280,900",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def check_rendered(driver, path: Path, expected_sections, *, min_images: int) -> dict:
    """Open ``path`` and check every expected section and every image rendered; return facts."""
    from selenium.webdriver.common.by import By

    driver.get(path.resolve().as_uri())
    driver.execute_script("return document.readyState")
    headings = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "section.section > h2")]
    for title in expected_sections:
        assert title in headings, f"section {title!r} missing; have {headings}"
    images = driver.execute_script(
        "return Array.from(document.images).map(i => ({complete: i.complete, nw: i.naturalWidth,"
        " nh: i.naturalHeight, w: i.getBoundingClientRect().width, h: i.getBoundingClientRect().height,"
        " alt: i.alt}))"
    )
    assert len(images) >= min_images, images
    for img in images:
        assert img["complete"] and img["nw"] > 0 and img["nh"] > 0, f"image did not decode: {img['alt']}"
        assert img["w"] >= 300 and img["h"] >= 150, f"image too small on the page: {img}"
    severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert not severe, f"console errors: {severe}"
    return {"headings": headings, "images": images}


def screenshot(driver, name: str, tmp_path: Path) -> Path:
    """Full-page screenshot under tests/artifacts/ (falls back to tmp_path if not writable)."""
    for _ in range(2):  # resizing reflows the page; measure again
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1280, min(max(900, int(height) + 140), 16000))
    try:
        ARTIFACTS.mkdir(exist_ok=True)
        out = ARTIFACTS / name
        driver.save_screenshot(str(out))
    except OSError:
        out = tmp_path / name
        driver.save_screenshot(str(out))
    assert out.stat().st_size > 10_000
    print(f"screenshot: {out}")
    return out


def headline_cells(driver, path: Path) -> dict:
    """The plan report's headline as the browser shows it: ``{data-key: (raw value, shown text)}``,
    plus the source and the evidence kind."""
    from selenium.webdriver.common.by import By

    driver.get(path.resolve().as_uri())
    cells = {td.get_attribute("data-key"): (td.get_attribute("data-value"), td.text)
             for td in driver.find_elements(By.CSS_SELECTOR, "div.headline td[data-key]")}
    box = driver.find_element(By.CSS_SELECTOR, "div.headline")
    evidence = driver.find_element(By.CSS_SELECTOR, "div.headline p.evidence")
    return {"cells": cells, "source": box.get_attribute("data-source"), "label": box.get_attribute("data-label"),
            "evidence_kind": evidence.get_attribute("data-kind"), "evidence_text": evidence.text}
