"""`tfx top --html` in a real browser: headless Chromium driven by Selenium, as the
report's test does. The page makes no network request, holds a card per unit with its
examples in the JSON's order, and hovering a token shows the value --json has for it."""
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tfx_cli.cli import app

from test_report_browser import driver  # noqa: F401,E402 (the shared Chromium fixture; pytest puts this folder on sys.path)

pytestmark = pytest.mark.browser

MODEL = ["-c", "gpt124m", "--layers", "2", "--d-model", "64", "--heads", "4", "--seed", "5"]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    folder = tmp_path_factory.mktemp("top")
    corpus = folder / "docs.txt"
    corpus.write_text("When you play the game of thrones, you win or you die.\n"
                      "the cat sat on the mat and the cat sat on the mat again\n")
    path = folder / "top.html"
    result = CliRunner().invoke(app, ["top", str(corpus), *MODEL, "--site", "blocks.1.ffn.act",
                                      "--units", "3,7", "-k", "3", "--around", "2", "--html",
                                      str(path), "--json"])
    assert result.exit_code == 0, result.output
    return path, json.loads(result.stdout)


def test_top_page_in_chromium(driver, page):  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    path, doc = page
    driver.get(Path(path).as_uri())
    cards = driver.find_elements(By.CSS_SELECTOR, ".card")
    assert [c.get_attribute("id") for c in cards] == ["unit-3", "unit-7"]
    units = doc["result"]["units"]
    for card, unit in zip(cards, units):
        values = [float(v.text) for v in card.find_elements(By.CSS_SELECTOR, ".val")]
        assert values == pytest.approx([e["value"] for e in unit["examples"]], abs=1e-4)
        first = card.find_elements(By.CSS_SELECTOR, ".ex")[0]
        at = first.find_element(By.CSS_SELECTOR, ".tok.at")
        ActionChains(driver).move_to_element(at).perform()
        tip = driver.find_element(By.ID, "tip")
        assert tip.is_displayed()
        shown = float(tip.text.rsplit("=", 1)[1])
        assert shown == pytest.approx(unit["examples"][0]["value"], abs=1e-4)
    requests = [json.loads(entry["message"])["message"] for entry in driver.get_log("performance")]
    urls = [m["params"]["request"]["url"] for m in requests
            if m["method"] == "Network.requestWillBeSent"]
    # the browser's own pages (chrome://) aside, only the file itself is read
    assert all(url.startswith(("file://", "chrome://", "data:")) for url in urls), urls
    assert any(url == Path(path).as_uri() for url in urls)
