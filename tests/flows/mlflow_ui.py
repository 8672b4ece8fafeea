"""Helpers for the UI check: a real ``mlflow server`` on a free 127.0.0.1 port over a run's store, and Debian's
headless Chromium driven through ``/usr/bin/chromedriver`` (selenium; no browser download). Screenshots go to
``test-artifacts/`` (gitignored)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from servers import free_port, stop_group, wait_healthy

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROME_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1600,1200",
]


@contextmanager
def mlflow_server(backend_uri: str, artifacts: Path, log_path: Path) -> Iterator[str]:
    """``mlflow server`` over ``backend_uri`` serving ``artifacts``; yields its base URL once /health answers."""
    port = free_port()
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_DISABLE_TELEMETRY="true")
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    cmd += ["--backend-store-uri", backend_uri, "--artifacts-destination", artifacts.as_uri()]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(f"{url}/health", proc, log_path)
            yield url
        finally:
            stop_group(proc)


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def open_and_wait(driver: Any, url: str, needle: str, shot: str) -> str:
    """Open ``url``, wait until ``needle`` is in the page text, save a screenshot; return the page text."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    SHOTS.mkdir(exist_ok=True)
    path = SHOTS / shot
    try:
        WebDriverWait(driver, 90, poll_frequency=1).until(lambda d: needle in d.find_element(By.TAG_NAME, "body").text)
    except TimeoutException:
        driver.save_screenshot(str(path))
        text = driver.find_element(By.TAG_NAME, "body").text
        pytest.fail(f"{needle!r} never appeared at {url} (screenshot {path}); page text:\n{text[:2000]}")
    # bring the last element that shows the needle into view, so the screenshot shows what was checked
    hits = driver.find_elements(By.XPATH, f"//*[contains(text(), '{needle}')]")
    if hits:
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", hits[-1])
    time.sleep(1)  # let the page finish painting before the screenshot
    assert driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return str(driver.find_element(By.TAG_NAME, "body").text)


@contextmanager
def whale_ui(env: dict[str, str], log_path: Path, *extra: str) -> Iterator[tuple[str, str, subprocess.Popen[bytes]]]:
    """``whale ui`` on a free port as a user runs it: the venv's ``whale`` script with the venv NOT on ``PATH``.
    Yields (base URL, the latest run's URL it printed, the process) once it printed that URL; stops it with
    SIGTERM (as a terminal's close would) and checks that it exits by itself."""
    port = free_port()
    script = Path(sys.executable).with_name("whale")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "whale_cli"]
    env = dict(env, PATH="/usr/bin:/bin")
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*cmd, "ui", "--port", str(port), *extra], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        landing = None
        while landing is None:
            text = log_path.read_text(errors="replace")
            landing = next(
                (x.split(": ", 1)[1].strip() for x in text.splitlines() if x.startswith("latest run: ")), None
            )
            if landing is None:
                assert proc.poll() is None, f"whale ui exited ({proc.returncode}):\n{text[-3000:]}"
                assert time.monotonic() < deadline, f"whale ui printed no run URL within 240 s:\n{text[-3000:]}"
                time.sleep(0.5)
        wait_healthy(f"{base}/health", proc, log_path)
        yield base, landing, proc
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log_path.read_text()[-3000:]
    finally:
        stop_group(proc)


def click_and_wait(driver: Any, href_part: str, needle: str, shot: str) -> str:
    """Click the first link whose href contains ``href_part`` (a user's click: scrolled into view, clicked), wait
    until the browser is at that link and ``needle`` is in the page text, save a screenshot; return the page text."""
    from selenium.common.exceptions import ElementClickInterceptedException, TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, 90, poll_frequency=1)
    SHOTS.mkdir(exist_ok=True)
    path = SHOTS / shot
    try:
        link = wait.until(lambda d: _link_to(d, href_part))
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", link)
        tabs, new_tab = set(driver.window_handles), link.get_attribute("target") == "_blank"
        try:
            link.click()
        except ElementClickInterceptedException:  # covered by a floating panel: the same click, dispatched
            driver.execute_script("arguments[0].click();", link)
        if new_tab:  # the link opens a new tab: follow it there
            wait.until(lambda d: set(d.window_handles) - tabs)
            driver.switch_to.window((set(driver.window_handles) - tabs).pop())
        wait.until(lambda d: href_part in d.current_url)  # the link was followed (the old page may hold the needle)
        wait.until(lambda d: needle in d.find_element(By.TAG_NAME, "body").text)
    except TimeoutException:
        driver.save_screenshot(str(path))
        text = driver.find_element(By.TAG_NAME, "body").text
        pytest.fail(
            f"no link to {href_part!r} or no {needle!r} after it (screenshot {path}); page text:\n{text[:2000]}"
        )
    time.sleep(1)  # let the page finish painting before the screenshot
    assert driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return str(driver.find_element(By.TAG_NAME, "body").text)


def _link_to(driver: Any, href_part: str) -> Any:
    """A displayed link whose href contains ``href_part``, one that opens in the same tab first (None if none)."""
    from selenium.webdriver.common.by import By

    links = [a for a in driver.find_elements(By.XPATH, f"//a[contains(@href, '{href_part}')]") if a.is_displayed()]
    links.sort(key=lambda a: a.get_attribute("target") == "_blank")
    return links[0] if links else None
