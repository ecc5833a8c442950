"""Results that show themselves: `_repr_html_` draws the command's pictures as inline HTML
(no script, nothing fetched), `__rich__` is the terminal view, and `result.tensors` is a
read-only mapping of trace name -> array."""
import base64
import io
import re
import subprocess
import sys
import zlib

import numpy as np
import pytest
from rich.console import Console

from tfx_cli import api

TEXT = "When you play game of thrones"
MODEL = dict(config="gpt2", layers=2, d_model=16, heads=2, tokenizer="word")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    import torch

    from tfx_cli.core.features import write_saelens

    g = torch.Generator().manual_seed(0)
    sae = tmp_path_factory.mktemp("sae") / "relu"
    write_saelens(sae, activation="relu", W_enc=torch.randn(16, 32, generator=g),
                  W_dec=torch.randn(32, 16, generator=g), b_enc=torch.zeros(32),
                  b_dec=torch.zeros(16), hook_name="blocks.1.hook_resid_pre")
    return {
        "attend": api.attend(TEXT, **MODEL),
        "lens": api.lens(TEXT, **MODEL),
        "patch": api.patch(TEXT, corrupt="When you play game of you", answer="win",
                           wrong="die", **MODEL),
        "attribute": api.attribute(TEXT, answer="win", **MODEL),
        "features": api.features(TEXT, sae=str(sae), **MODEL),
        "next": api.next(TEXT, **MODEL),
        "generate": api.generate("When you", max_new_tokens=2, **MODEL),
        "trace": api.trace(TEXT, select=["logits", "blocks.0.attn.pattern"], **MODEL),
        "tokenize": api.tokenize(TEXT),
        "count-params": api.count_params(config="gpt2"),
        "report": api.report(TEXT, **MODEL),
    }


def heat_cells(page: str) -> list[tuple[str, str]]:
    """(background, hover title) of every shaded heat-map cell."""
    return re.findall(r'<td style="(background:rgb\([^"]*)" title="([^"]*)"', page)


def test_every_result_draws_html_without_scripts_or_network(results):
    for command, result in results.items():
        page = result._repr_html_()
        assert page.startswith('<div class="tfx-result">'), command
        assert f"tfx {command}" in page or command == "report", command
        if command != "report":  # the report's own page runs in a sandboxed frame
            assert "<script" not in page.lower(), command
        assert not re.search(r'(src|href)="(https?:)?//', page), command


def test_the_pictures_are_the_plots_pictures(results):
    attend = results["attend"]._repr_html_()
    pattern = results["attend"].tensors["blocks.0.attn.pattern"]
    assert attend.count('class="tfx-heat"') == 2  # one map per head
    cells = heat_cells(attend)
    assert len(cells) == pattern.size
    assert cells[1][1].endswith(f"{pattern[0, 0, 1]:.4f}")  # head 0, query 0, key 1
    lens = results["lens"]._repr_html_()
    assert lens.count("<tr>") == 1 + len(results["lens"].layers)  # layers × positions
    patch = results["patch"]._repr_html_()
    effect = results["patch"].tensors["patch.effect"]
    assert len(heat_cells(patch)) == effect.size and "thrones*" in patch
    attribute = results["attribute"]._repr_html_()
    assert attribute.count("<rect") == len(results["attribute"].parts)  # one bar each
    features = results["features"]._repr_html_()
    assert 'class="tfx-heat"' in features and 'class="tfx-chips"' in features
    assert f"#{results['features'].top_features[0].index}" in features
    assert "tfx-chips" in results["tokenize"]._repr_html_()
    assert "srcdoc=" in results["report"]._repr_html_()


def test_a_large_matrix_is_a_png_of_one_pixel_per_cell(results):
    page = results["trace"]._repr_html_()  # logits: 6 × 55 > 48 columns
    data = re.search(r'src="data:image/png;base64,([^"]+)"', page).group(1)
    png = base64.b64decode(data)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (height, width) == results["trace"].tensors["logits"].shape
    chunk = png[33:]  # IDAT after IHDR: length, type, data
    assert chunk[4:8] == b"IDAT"
    raw = zlib.decompress(chunk[8:8 + int.from_bytes(chunk[:4], "big")])
    assert len(raw) == height * (1 + 3 * width)


def test_rich_draws_the_terminal_view(results):
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(results["features"])
    text = out.getvalue()
    assert text.startswith("tfx features") and "top 5 features per token" in text
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(results["patch"])
    assert "patch.effect" in out.getvalue()


def test_tensors_are_a_read_only_mapping(results):
    r = results["attend"]
    names = list(r.tensors)
    assert names == r.tensors.names() and "blocks.0.attn.pattern" in names
    as_dict = dict(r.tensors)
    assert list(as_dict) == names
    assert all(isinstance(v, np.ndarray) for v in as_dict.values())
    assert [name for name in r.tensors] == names
    assert [name for name, _ in r.tensors.items()] == names
    assert len(r.tensors) == len(names) and "nothing" not in r.tensors
    with pytest.raises(KeyError):
        r.tensors["nothing"]
    with pytest.raises(TypeError):
        r.tensors["blocks.0.attn.pattern"] = np.zeros(1)  # no item assignment
    assert r.arrays().keys() == as_dict.keys()


def test_importing_the_api_loads_no_torch_and_no_drawing():
    code = ("import sys, tfx_cli.api\n"
            "print(' '.join(m for m in sys.modules if m.startswith(('torch', 'numpy', "
            "'tfx_cli.render', 'tfx_cli.core.results', 'rich'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == []
