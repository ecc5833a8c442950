"""samples/notebook.ipynb, executed in a real Jupyter kernel (nbclient + ipykernel, the
`notebook` extra): the results of attend, lens, patch and features show themselves as
HTML pictures (heat maps), and the notebook runs top to bottom without an error."""
import re
from pathlib import Path

import pytest

from needs import need, need_import

NOTEBOOK_INSTALL = "pip install 'tfx-cli[notebook]'"
nbformat = need_import("nbformat", NOTEBOOK_INSTALL)
nbclient = need_import("nbclient", NOTEBOOK_INSTALL)
need("ipykernel", NOTEBOOK_INSTALL)

NOTEBOOK = Path(__file__).resolve().parents[1] / "samples" / "notebook.ipynb"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(
                                         tmp_path_factory.mktemp("notebook"))}})
    client.execute()
    return {tag: cell for cell in nb.cells for tag in cell.metadata.get("tags", [])}


def html_of(cell) -> str:
    found = [out["data"]["text/html"] for out in cell.outputs
             if out.get("output_type") == "execute_result" and "text/html" in out.get("data", {})]
    assert len(found) == 1, cell.source
    return found[0]


@pytest.mark.parametrize("tag, picture", [
    ("attend", r'<table class="tfx-heat">'),
    ("lens", r'<table class="tfx-rows">'),
    ("patch", r'<table class="tfx-heat">'),
    ("features", r'<table class="tfx-heat">'),
    ("ablate", r'<table class="tfx-rows">'),
])
def test_results_show_themselves_as_html_pictures(executed, tag, picture):
    page = html_of(executed[tag])
    assert page.startswith('<div class="tfx-result">')
    assert re.search(picture, page), page[:400]
    shaded = re.findall(r'style="background:rgb\(\d+,\d+,\d+\)', page)
    assert len(shaded) >= 6  # coloured cells: a picture, not a repr
    assert f"tfx {'next' if tag == 'ablate' else tag}" in page
    assert "<script" not in page.lower()


def test_the_attention_picture_has_a_map_per_head(executed):
    page = html_of(executed["attend"])
    assert page.count('class="tfx-heat"') == 2  # 2 heads
    assert re.search(r"head 0.*head 1", page, re.S)


def test_tensors_are_a_mapping_in_the_kernel(executed):
    text = executed["features-data"].outputs[0]["data"]["text/plain"]
    assert "'features.acts', 'features.recon', 'features.error'" in text and "(6, 64)" in text
    assert "changed: features." in html_of(executed["ablate"])
