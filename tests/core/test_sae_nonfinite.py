"""An SAE with a NaN or an infinity in its weights is refused when it is read, naming the
file and the tensor; a feature steered past float32's range is refused naming --scale,
however the overflow shows (the final norm's variance, the logits), never answered with
a table of zeros and exit 0."""
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from tfx_cli.cli import app
from tfx_cli.core.model import finite

TEXT = "When you play game of thrones"
WORDY = ["-c", "gpt2", "--layers", "1", "--d-model", "6", "--heads", "2", "-t", "word"]
# gpt124m's shape made tiny: its final norm's shift starts at zero, so a variance that
# overflows used to leave every logit 0.000 and exit 0
TINY = ["-c", "gpt124m", "--layers", "1", "--d-model", "16", "--heads", "2"]


def run(*args):
    return CliRunner().invoke(app, list(args), env={"TFX_QUIET": "1", "COLUMNS": "100"})


def sae(folder: Path, d_in: int, bad: str | None = None, d_sae: int = 8) -> Path:
    """A random SAELens folder reading blocks.0.resid_out; `bad`: 'nan' puts a NaN at
    W_enc[3, 5], 'inf' an infinity at W_dec[2, 1]."""
    folder.mkdir()
    g = torch.Generator().manual_seed(0)
    t = {"W_enc": torch.randn(d_in, d_sae, generator=g),
         "W_dec": torch.randn(d_sae, d_in, generator=g),
         "b_enc": torch.zeros(d_sae), "b_dec": torch.zeros(d_in)}
    if bad == "nan":
        t["W_enc"][3, 5] = float("nan")
    elif bad == "inf":
        t["W_dec"][2, 1] = float("inf")
    (folder / "cfg.json").write_text(json.dumps({
        "architecture": "standard", "d_in": d_in, "d_sae": d_sae,
        "metadata": {"hook_name": "blocks.0.hook_resid_post"}}))
    save_file(t, str(folder / "sae_weights.safetensors"))
    return folder


def refused(out, *phrases) -> str:
    assert out.exit_code == 2 and out.stdout == "", (out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfx: error: "), out.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("bad, tensor", [("nan", "W_enc[3, 5]"), ("inf", "W_dec[2, 1]")])
@pytest.mark.parametrize("command", [
    ["features", TEXT, *WORDY, "--sae", "{dir}"],
    ["top", "python-docs", *WORDY, "--sae", "{dir}", "--units", "3", "--max-docs", "2"],
    ["next", TEXT, *WORDY, "--sae", "{dir}", "--ablate", "features.3"],
    ["next", TEXT, *WORDY, "--steer-feature", "{dir}:3"],
], ids=["features", "top", "ablate", "steer-feature"])
def test_non_finite_sae_weights_are_refused_at_load(command, bad, tensor, tmp_path):
    folder = sae(tmp_path / "sae", 6, bad)
    line = refused(run(*[a.replace("{dir}", str(folder)) for a in command]),
                   f"--sae {folder}: sae_weights.safetensors holds {bad} in {tensor}")
    assert "checkpoint" not in line  # the SAE is to blame, not the model's weights
    # the same folder with the value made finite runs
    sae(tmp_path / "fine", 6)
    ok = run(*[a.replace("{dir}", str(tmp_path / "fine")) for a in command])
    assert ok.exit_code == 0, ok.stderr


def test_a_gemma_scope_2_file_is_named_with_its_own_tensor_names(tmp_path):
    folder = tmp_path / "layer_0" / "resid_post"
    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    w_dec = torch.randn(8, 6, generator=g)
    w_dec[1, 4] = float("-inf")
    save_file({"w_enc": torch.randn(6, 8, generator=g), "w_dec": w_dec,
               "b_enc": torch.zeros(8), "b_dec": torch.zeros(6),
               "threshold": torch.zeros(8)}, str(folder / "params.safetensors"))
    refused(run("features", TEXT, *WORDY, "--sae", str(folder)),
            "params.safetensors holds -inf in w_dec[1, 4]")


def test_a_steered_feature_past_float32_names_scale_not_the_checkpoint(tmp_path):
    folder = sae(tmp_path / "sae", 16)
    for command in ("next", "generate"):
        line = refused(run(command, TEXT, *TINY, "--steer-feature", f"{folder}:3",
                           "--scale", "1e30"), "use a smaller --scale (now 1e+30)")
        assert "checkpoint" not in line
    ok = run("next", TEXT, *TINY, "--steer-feature", f"{folder}:3", "--scale", "4", "--json")
    assert ok.exit_code == 0, ok.stderr
    logits = [c["logit"] for c in json.loads(ok.stdout)["result"]["candidates"]]
    assert len(set(logits)) > 1  # a real answer, not a table of equal logits


def test_trace_of_the_final_norm_refuses_an_infinite_variance(tmp_path):
    folder = sae(tmp_path / "sae", 6)
    line = refused(run("trace", TEXT, *WORDY, "--select", "ln_f.*", "--steer-feature",
                       f"{folder}:3", "--scale", "1e30", "--json"),
                   "ln_f.var became inf", "use a smaller --scale (now 1e+30)")
    assert "the variance of blocks.0.resid_out" in line  # what the final norm read
    # steering the final norm's own input: caught in the norm itself
    refused(run("trace", TEXT, *TINY, "--steer", "ln_f.in", "--toward", "a", "--away", "b",
                "--scale", "1e30", "--select", "ln_f.*"),
            "ln_f.var became inf", "use a smaller --scale (now 1e+30)")


def test_fits_norm_refuses_overflowing_rows_only():
    assert finite.fits_norm(torch.randn(2, 5, 8))
    huge = torch.randn(2, 5, 8)
    huge[1, 2] *= 1e30  # finite, but its square is not
    assert finite.is_finite(huge) and not finite.fits_norm(huge)
    # values large together: the whole tensor's sum of squares overflows float32, each
    # row's does not
    together = torch.full((4096, 256), 3e16)
    assert not torch.isfinite(torch.linalg.vector_norm(together))
    assert finite.fits_norm(together)
    assert not finite.fits_norm(torch.tensor([[1.0, float("nan")]]))
    assert finite.fits_norm(torch.arange(4))  # integers are always finite
