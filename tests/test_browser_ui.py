"""The lineage is browsable: a real ``mlflow server`` over a populated store, opened in headless Chromium.

Populates a lineage store in a temp dir (a run, a leg, a harness artifact, a checkpoint Logged Model tagged with the
harness sha), serves it with ``mlflow server`` on a free 127.0.0.1 port, and checks that the harness artifact name
shows on the run page and the checkpoint's harness sha on the logged-model page. Screenshots go to
``test-artifacts/`` (gitignored). Needs Debian's ``chromium`` + ``chromium-driver`` and the ``selenium`` package
(driven through ``/usr/bin/chromedriver``: no browser download).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from whale_core.lineage import Lineage, harness_artifact_path

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
SHOTS = REPO / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
HARNESS_SHA = "c0ffee" + "1234567890abcdef" * 3 + "0123456789"
HARNESS = "whale_harness: 1\nname: reversed-sum\ninstruction: Add the two numbers.\nanswer: {reverse: true}\n"
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


@dataclass(frozen=True)
class Store:
    root: Path
    uri: str
    experiment_id: str
    leg_run_id: str
    model_id: str
    harness_file: str


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    root = tmp_path_factory.mktemp("ui-store")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    lin = Lineage(uri, experiment="whale")
    parent = lin.ensure_run("ui-run", "ui-run", {"mode": "whale-adaptive", "weights": {"lr": 5e-5}})
    leg = lin.ensure_leg(parent, "ui-run", 1, "weights")
    harness_file = lin.log_harness(
        leg, HARNESS_SHA, HARNESS, name="reversed-sum", parent_sha=None, status="accepted", score=0.61
    )
    lin.log_metrics(leg, {"val/exact_match": 0.61}, step=1)
    ckpt = root / "ckpt"
    ckpt.mkdir()
    (ckpt / "adapter_config.json").write_text('{"r": 16}\n')
    model_id = lin.log_checkpoint(
        leg, ckpt, checkpoint_id="ckpt-0001", harness_sha=HARNESS_SHA, parent_checkpoint_id=None, step=1
    )
    lin.end(leg)
    lin.end(parent)
    return Store(root, uri, lin.experiment_id, leg, model_id, harness_file)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate the server's whole process group (uvicorn workers included), escalating to SIGKILL."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(store: Store) -> Iterator[str]:
    port = _free_port()
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_DISABLE_TELEMETRY="true")
    log = (store.root / "server.log").open("wb")
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    cmd += ["--backend-store-uri", store.uri, "--artifacts-destination", (store.root / "mlartifacts").as_uri()]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mlflow server exited with {proc.returncode}: {(store.root / 'server.log').read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server not healthy after 180 s: {(store.root / 'server.log').read_text()}")
            time.sleep(0.5)
        yield url
    finally:
        _stop(proc)
        log.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def _open_and_wait(driver: Any, url: str, needle: str, shot: str) -> str:
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
    # bring the first element that shows the needle into view, so the screenshot shows what was checked
    hits = driver.find_elements(By.XPATH, f"//*[contains(text(), '{needle}')]")
    if hits:
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", hits[-1])
    time.sleep(1)  # let the page finish painting before the screenshot
    assert driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return str(driver.find_element(By.TAG_NAME, "body").text)


def test_run_page_shows_the_harness_artifact(store: Store, server: str, browser: Any) -> None:
    url = f"{server}/#/experiments/{store.experiment_id}/runs/{store.leg_run_id}/artifacts/{store.harness_file}"
    name = store.harness_file.rsplit("/", 1)[-1]
    assert store.harness_file == harness_artifact_path(HARNESS_SHA, "accepted")
    text = _open_and_wait(browser, url, name, "mlflow_run_page.png")
    assert "iter-01-weights" in text
    assert "reversed-sum" in text  # the artifact's contents are rendered too
    assert (SHOTS / "mlflow_run_page.png").stat().st_size > 10_000


def test_logged_model_page_shows_the_harness_sha(store: Store, server: str, browser: Any) -> None:
    url = f"{server}/#/experiments/{store.experiment_id}/models/{store.model_id}"
    text = _open_and_wait(browser, url, HARNESS_SHA, "mlflow_model_page.png")
    assert "ckpt-0001" in text
    assert "iter-01-weights" in text  # its source run
    assert (SHOTS / "mlflow_model_page.png").stat().st_size > 10_000
