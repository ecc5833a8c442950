"""The attribution graph's page (`tfx graph --html`) in a real browser: headless Chromium
driven by Selenium, as the report's test does. A synthetic pruned graph
(tests/circuit_graphs.py) is drawn from file://: no request besides the page itself and
no console error, one SVG element per node and per edge (features and errors without an
edge left out, as graph.json does), and clicking a node lists exactly its inputs and
outputs with their weights."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from circuit_graphs import synthetic_graph
from tfx_cli.core.circuits.neuronpedia import node_ids
from tfx_cli.render.graph_page import graph_html

from test_report_browser import _network_requests, driver  # noqa: F401,E402 (the shared Chromium fixture)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def graph():
    g = synthetic_graph(n_tokens=7, n_layers=3, n_features=30, n_logits=3, density=0.2,
                        seed=11)
    adjacency = g["adjacency"].copy()
    lonely = [i for i, n in enumerate(g["nodes"]) if n["kind"] == "feature"][5]
    adjacency[lonely, :] = adjacency[:, lonely] = 0  # a feature pruning left without edges
    g["adjacency"] = adjacency
    g["lonely"] = lonely
    return g


@pytest.fixture(scope="module")
def page(graph, tmp_path_factory):
    path = tmp_path_factory.mktemp("graph") / "graph.html"
    path.write_text(graph_html(graph), encoding="utf-8")
    return path


def test_the_page_has_no_external_url(page):
    text = page.read_text(encoding="utf-8")
    assert re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I) == []
    assert "<link rel=\"stylesheet\"" not in text and " src=" not in text


def test_graph_page_in_headless_chromium(driver, page, graph):  # noqa: F811
    url = page.resolve().as_uri()
    driver.get("about:blank")
    _network_requests(driver)  # drain what the browser's own start-up page fetched
    driver.get(url)
    assert driver.execute_script("return document.body.dataset.ready") == "1"
    requests = _network_requests(driver)
    assert (url, url) in requests
    assert [u for doc, u in requests if u != url] == [], requests
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
    errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == [], errors

    ids = node_ids(graph)
    adjacency = graph["adjacency"]
    targets, sources = np.nonzero(adjacency)
    linked = set(targets) | set(sources)
    want = {ids[i] for i, n in enumerate(graph["nodes"])
            if i in linked or n["kind"] in ("embedding", "logit")}
    drawn = driver.find_elements("css selector", "svg .node")
    assert sorted(e.get_attribute("data-id") for e in drawn) == sorted(want)
    assert ids[graph["lonely"]] not in want
    for kind, tag in (("feature", "circle"), ("error", "rect"), ("embedding", "rect"),
                      ("logit", "path")):
        shown = driver.find_elements("css selector", f"svg .node.{kind}")
        assert shown and {e.tag_name for e in shown} == {tag}
    edges = driver.find_elements("css selector", "svg .edge")
    assert len(edges) == len(targets)
    # width grows with |weight|, colour follows the sign
    drawn_edges = driver.execute_script(
        "return [...document.querySelectorAll('svg .edge')].map(e => [e.dataset.source,"
        " e.dataset.target, +e.dataset.weight, +e.getAttribute('stroke-width'),"
        " getComputedStyle(e).stroke])")
    heavy = max(drawn_edges, key=lambda e: abs(e[2]))
    light = min(drawn_edges, key=lambda e: abs(e[2]))
    assert heavy[3] > light[3]
    assert {e[4] for e in drawn_edges if e[2] > 0} == {"rgb(33, 102, 172)"}
    assert {e[4] for e in drawn_edges if e[2] < 0} == {"rgb(178, 24, 43)"}

    # the scores are on the page
    assert driver.find_element("id", "replacement-score").text == "0.8123"
    assert driver.find_element("id", "completeness-score").text == "0.9346"
    _click_shows_inputs_and_outputs(driver, graph, ids)


def _listed(driver, list_id: str) -> dict:
    items = driver.find_elements("css selector", f"#{list_id} li")
    return {li.get_attribute("data-id"): float(li.get_attribute("data-weight")) for li in items}


def _click_shows_inputs_and_outputs(driver, graph, ids):
    adjacency = graph["adjacency"]
    # a feature with both inputs and outputs
    node = next(i for i, n in enumerate(graph["nodes"]) if n["kind"] == "feature"
                and adjacency[i].any() and adjacency[:, i].any())
    driver.find_element("css selector", f'svg .node[data-id="{ids[node]}"]').click()
    assert driver.find_element("id", "side").get_attribute("data-node") == ids[node]
    inputs = {ids[s]: float(adjacency[node, s]) for s in np.flatnonzero(adjacency[node])}
    outputs = {ids[t]: float(adjacency[t, node]) for t in np.flatnonzero(adjacency[:, node])}
    for list_id, want in (("inputs", inputs), ("outputs", outputs)):
        got = _listed(driver, list_id)
        assert set(got) == set(want)
        for key, weight in want.items():
            assert got[key] == pytest.approx(weight, rel=5e-4)
        assert driver.find_element("id", f"{list_id}-count").text == str(len(want))
        shown = [abs(w) for w in got.values()]
        assert shown == sorted(shown, reverse=True)  # strongest first
    lit = driver.find_elements("css selector", "svg .edge.lit")
    assert len(lit) == len(inputs) + len(outputs)
    assert driver.find_element("css selector", ".node.selected").get_attribute("data-id") == ids[node]
    # an entry in the list moves the selection to that node
    first = driver.find_elements("css selector", "#inputs li")[0]
    goes_to = first.get_attribute("data-id")
    first.click()
    assert driver.find_element("id", "side").get_attribute("data-node") == goes_to
    # a logit lists the nodes feeding it and no output
    logit = next(i for i, n in enumerate(graph["nodes"]) if n["kind"] == "logit")
    driver.find_element("css selector", f'svg .node[data-id="{ids[logit]}"]').click()
    assert set(_listed(driver, "inputs")) == {ids[s] for s in np.flatnonzero(adjacency[logit])}
    assert _listed(driver, "outputs") == {}
    assert driver.find_element("id", "picked").text.startswith("logit")


def test_a_large_graph_draws_its_strongest_edges_and_lists_them_all(driver, graph, tmp_path):  # noqa: F811
    """Past max_edges the page draws the strongest edges only and says so; a click still
    lists every input and output."""
    path = tmp_path / "capped.html"
    path.write_text(graph_html(graph, max_edges=25), encoding="utf-8")
    driver.get(path.resolve().as_uri())
    assert driver.execute_script("return document.body.dataset.ready") == "1"
    adjacency = graph["adjacency"]
    weights = np.abs(adjacency[adjacency != 0])
    drawn = [abs(float(e.get_attribute("data-weight")))
             for e in driver.find_elements("css selector", "svg .edge")]
    assert len(drawn) == 25 < len(weights)
    assert min(drawn) == pytest.approx(np.sort(weights)[-25], rel=5e-4)
    note = driver.find_element("id", "edges-note").text
    assert "25 strongest drawn" in note
    ids = node_ids(graph)
    node = int(np.argmax((adjacency != 0).sum(axis=1)))  # the node with most inputs
    driver.find_element("css selector", f'svg .node[data-id="{ids[node]}"]').click()
    assert set(_listed(driver, "inputs")) == {ids[s] for s in np.flatnonzero(adjacency[node])}
    assert len(driver.find_elements("css selector", "svg .edge.lit")) <= 25
