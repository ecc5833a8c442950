"""The HTML report in a real browser: headless Chromium driven by Selenium.

Opens a generated report from file:// and checks that it makes no network request, that
the model view holds layers x heads maps, that clicking a head opens it, and that hovering
a cell shows the value `tfx trace --json` has for that cell (to the 4 decimals shown).

Runs in CI (CI=true: a missing browser fails the test); skips locally without Chromium.
Debian: apt-get install chromium chromium-driver; PyPI: selenium (the test extra).
"""
import base64
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from needs import need, need_program
from tfx_cli.cli import app

pytestmark = pytest.mark.browser

TEXT = "When you play game of thrones you win or you die"
MODEL = ["--layers", "3", "--heads", "4", "--d-model", "64", "--seed", "7"]
LAYERS, HEADS = 3, 4
DECIMALS = 4


APT = "Debian: apt-get install chromium chromium-driver"


def _browser_paths() -> tuple[str, str]:
    need("selenium", "pip install selenium")
    chromium = need_program(("chromium", "chromium-browser", "google-chrome"), APT,
                            env="TFX_CHROMIUM")
    driver = need_program(("chromedriver",), APT, env="TFX_CHROMEDRIVER")
    return chromium, driver


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    chromium, chromedriver = _browser_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    profile = tmp_path_factory.mktemp("chromium-profile")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-default-apps",
                 "--disable-extensions", "--window-size=1280,1600",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    browser = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    yield browser
    browser.quit()


def _run(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "report.html"
    _run(["report", TEXT, "-o", str(path), *MODEL])
    return path


def _pattern(select: str) -> dict:
    doc = json.loads(_run(["trace", TEXT, "--select", select, "--json", *MODEL]))
    return {name: tensor["data"] for name, tensor in doc["tensors"].items()}


def _network_requests(driver) -> list[tuple[str, str]]:
    """(document URL, request URL) of every request in the DevTools Network log."""
    requests = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            params = message["params"]
            requests.append((params.get("documentURL", ""), params["request"]["url"]))
    return requests


def _hover(driver, canvas, i: int, j: int) -> dict:
    from selenium.webdriver.common.action_chains import ActionChains

    cell, left, top = (int(canvas.get_attribute(f"data-{k}")) for k in ("cell", "left", "top"))
    width, height = canvas.size["width"], canvas.size["height"]
    # Selenium offsets are from the element's centre
    x = left + (j + 0.5) * cell - width / 2
    y = top + (i + 0.5) * cell - height / 2
    ActionChains(driver).move_to_element_with_offset(canvas, int(x), int(y)).perform()
    read = driver.find_element
    return {key: read("id", f"hover-{key}").text for key in ("query", "key", "value")}


def _open_head(driver, layer: int, head: int):
    thumb = driver.find_element(
        "css selector", f'canvas.thumb[data-layer="{layer}"][data-head="{head}"]')
    thumb.click()
    assert "selected" in thumb.get_attribute("class")
    title = driver.find_element("id", "head-title").text
    assert title == f"layer {layer} · head {head}"
    canvas = driver.find_element("id", "head-canvas")
    assert canvas.get_attribute("data-layer") == str(layer)
    assert canvas.get_attribute("data-head") == str(head)
    return canvas


def test_report_in_headless_chromium(driver, report, tmp_path):
    url = report.resolve().as_uri()
    driver.get("about:blank")
    _network_requests(driver)  # drain what the browser's own start-up page fetched
    driver.get(url)
    assert driver.execute_script("return document.body.dataset.ready") == "1"

    # no network at all: no resource loaded, and no request besides the page itself
    resources = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources == []
    requests = _network_requests(driver)
    assert (url, url) in requests  # the log works: it saw the page itself
    from_page = [u for doc, u in requests if doc == url and u != url]
    external = [u for _, u in requests if u.split(":", 1)[0] in ("http", "https", "ws", "wss")]
    assert from_page == [] and external == [], requests
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors

    # the page states model, seed and input
    assert driver.find_element("id", "seed").text == "7"
    assert driver.find_element("id", "input-text").text == TEXT
    assert "gpt124m" in driver.find_element("id", "model-name").text

    # model view: layers x heads small maps, each painted
    thumbs = driver.find_elements("css selector", "#model-grid canvas.thumb")
    assert len(thumbs) == LAYERS * HEADS
    painted = driver.execute_script(
        "const c = arguments[0]; const d = c.getContext('2d')"
        ".getImageData(0, 0, c.width, c.height).data; let n = 0;"
        "for (let k = 3; k < d.length; k += 4) n += d[k] > 0; return n;", thumbs[-1])
    assert painted == int(thumbs[-1].get_attribute("width")) ** 2

    # layer 0 is computed identically by `tfx trace --select blocks.0.attn.pattern`
    truth = _pattern("blocks.0.attn.pattern")["blocks.0.attn.pattern"]
    canvas = _open_head(driver, 0, 2)
    tokens = json.loads(driver.execute_script(
        "return document.getElementById('tfx-data').textContent"))["tokens"]
    for i, j in [(5, 3), (11, 0), (11, 11), (0, 0), (7, 6)]:
        shown = _hover(driver, canvas, i, j)
        assert shown["value"] == f"{truth[2][i][j]:.{DECIMALS}f}", (i, j)
        assert shown["query"] == f"{i} {json.dumps(tokens[i], ensure_ascii=False)}"
        assert shown["key"] == f"{j} {json.dumps(tokens[j], ensure_ascii=False)}"
    assert _hover(driver, canvas, 2, 9)["value"] == "0.0000"  # causal: a future key

    # a deeper layer: `--select blocks.2.attn.pattern` runs the earlier layers on the
    # fused kernel, whose float32 rounding may differ by an ulp from the explicit path;
    # the same path (all patterns recorded, as the report does) agrees exactly.
    alone = _pattern("blocks.2.attn.pattern")["blocks.2.attn.pattern"]
    same_path = _pattern("blocks.*.attn.pattern")["blocks.2.attn.pattern"]
    canvas = _open_head(driver, 2, 3)
    for i, j in [(4, 1), (10, 9), (11, 3)]:
        shown = _hover(driver, canvas, i, j)["value"]
        assert shown == f"{same_path[3][i][j]:.{DECIMALS}f}", (i, j)
        assert abs(float(shown) - alone[3][i][j]) <= 0.5 * 10 ** -DECIMALS + 1e-6

    # the whole page, for a person to look at (TFX_SCREENSHOT_DIR keeps it)
    shot = Path(os.environ.get("TFX_SCREENSHOT_DIR", tmp_path)) / "report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    capture = driver.execute_cdp_cmd("Page.captureScreenshot", {"captureBeyondViewport": True})
    shot.write_bytes(base64.b64decode(capture["data"]))
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 10_000


def test_cross_attention_grid_of_an_encoder_decoder(driver, tmp_path):
    """toy with --target: the page adds the decoder's cross-attention grid, whose head
    view has the target's tokens on its rows and the source's on its columns, with the
    values `tfx trace --target` records."""
    source, target = "When you play game of thrones", "you win or you die"
    path = tmp_path / "toy.html"
    _run(["report", source, "-c", "toy", "--target", target, "-o", str(path)])
    driver.get(path.resolve().as_uri())
    assert driver.execute_script("return document.body.dataset.ready") == "1"
    assert len(driver.find_elements("css selector", "#cross-grid canvas.thumb")) == 2
    doc = json.loads(_run(["trace", source, "-c", "toy", "--target", target, "--select",
                           "decoder.blocks.0.cross.pattern", "--json"]))
    truth = doc["tensors"]["decoder.blocks.0.cross.pattern"]["data"]
    thumb = driver.find_element("css selector",
                                'canvas.thumb[data-grid="cross"][data-layer="0"][data-head="1"]')
    thumb.click()
    assert driver.find_element("id", "head-title").text == "cross-attention · layer 0 · head 1"
    canvas = driver.find_element("id", "head-canvas")
    assert (canvas.get_attribute("data-rows"), canvas.get_attribute("data-cols")) == ("6", "6")
    for i, j in [(0, 0), (3, 5), (5, 2)]:
        shown = _hover(driver, canvas, i, j)
        assert shown["value"] == f"{truth[1][i][j]:.{DECIMALS}f}", (i, j)
        assert shown["query"] == f"{i} {json.dumps((['<start>'] + target.split())[i])}"
        assert shown["key"] == f"{j} {json.dumps(source.split()[j])}"
