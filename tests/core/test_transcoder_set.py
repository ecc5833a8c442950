"""The transcoder set as one type (core/features/transcoder_set.py): config.yaml read with
PyYAML's safe_load (flow lists, JSON, anchors; Python tags refused, never run; a
malformed file refused by name), the layouts read to the same set (circuit-tracer's
files, Gemma Scope's .npz, Gemma Scope 2's params.safetensors, SAELens folders), each
layer's activation an architectures.py class, and random damage to a set's files
refused by name, never an internal error."""
import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from tfx_cli.cli import app
from tfx_cli.core.features import architectures as arch
from tfx_cli.core.features.transcoder_set import read_transcoders
from tfx_cli.errors import TfxError, TranscoderError

D, F, L = 16, 24, 2
BLOCK = ("model_kind: transcoder_set\nfeature_input_hook: mlp.hook_in\n"
         "feature_output_hook: hook_mlp_out\ntranscoders:\n"
         "  - layer_0.safetensors\n  - layer_1.safetensors\n")


def _layer(seed: int, *, jump=False, skip=False) -> dict:
    """circuit-tracer's names and shapes: W_enc (F, D)."""
    g = torch.Generator().manual_seed(seed)
    t = {"W_enc": torch.randn(F, D, generator=g) / 4, "W_dec": torch.randn(F, D, generator=g) / 5,
         "b_enc": torch.randn(F, generator=g) * 0.1 - 0.1, "b_dec": torch.randn(D, generator=g)}
    if jump:
        t["activation_function.threshold"] = torch.rand(F, generator=g) * 0.2 + 0.01
    if skip:
        t["W_skip"] = torch.randn(D, D, generator=g) / 10
    return t


def _set(folder: Path, config: str = BLOCK, **kw) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(L):
        save_file(_layer(i, **kw), str(folder / f"layer_{i}.safetensors"))
    (folder / "config.yaml").write_text(config, encoding="utf-8")
    return folder


def _same_sets(a, b):
    assert (a.input_hook, a.output_hook, a.n_layers, a.width) == \
        (b.input_hook, b.output_hook, b.n_layers, b.width)
    x = torch.randn(5, D, generator=torch.Generator().manual_seed(9))
    for i in range(a.n_layers):
        assert torch.equal(a.decode(i, a.encode(i, x), x), b.decode(i, b.encode(i, x), x))


@pytest.mark.parametrize("config", [
    # a flow list
    "model_kind: transcoder_set\nfeature_input_hook: mlp.hook_in\n"
    "feature_output_hook: hook_mlp_out\ntranscoders: [layer_0.safetensors, layer_1.safetensors]\n",
    # JSON, which YAML reads
    json.dumps({"model_kind": "transcoder_set", "feature_input_hook": "mlp.hook_in",
                "feature_output_hook": "hook_mlp_out",
                "transcoders": ["layer_0.safetensors", "layer_1.safetensors"]}),
    # anchors and aliases, quotes, comments and a document marker
    "---\n# hooks named once\nhooks: &in 'mlp.hook_in'\nfeature_input_hook: *in\n"
    "feature_output_hook: \"hook_mlp_out\"  # the MLP's output\n"
    "files: &files\n  - layer_0.safetensors\n  - layer_1.safetensors\ntranscoders: *files\n",
], ids=["flow-list", "json", "anchors"])
def test_yaml_forms_read_as_the_block_form(tmp_path, config):
    plain = read_transcoders(_set(tmp_path / "plain"), n_layers=L, d_model=D)
    other = read_transcoders(_set(tmp_path / "other", config), n_layers=L, d_model=D)
    _same_sets(plain, other)


def test_python_tags_are_refused_and_never_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = BLOCK + "scan: !!python/object/apply:os.system ['touch pwned.txt']\n"
    with pytest.raises(TranscoderError, match="config.yaml is not valid YAML at line 7"):
        read_transcoders(_set(tmp_path / "tc", config), n_layers=L, d_model=D)
    assert not (tmp_path / "pwned.txt").exists()


@pytest.mark.parametrize("config, why", [
    ("feature_input_hook: [mlp.hook_in\n", "not valid YAML at line 2"),  # unclosed list
    ("feature_input_hook mlp.hook_in\ntranscoders:\n  - a\n", "not valid YAML at line 2"),
    ("- just\n- a list\n", "holds a list, not the mapping"),
    ("", "holds a NoneType, not the mapping"),
    (BLOCK.replace("  - layer_1.safetensors\n", "  - [layer_1.safetensors]\n"),
     "entry 1 is ['layer_1.safetensors'], not a file name"),
])
def test_a_malformed_config_is_refused_by_name(tmp_path, config, why):
    with pytest.raises(TranscoderError, match=r"tc: (config.yaml)?.*" + why.replace("[", r"\[")
                       .replace("]", r"\]")):
        read_transcoders(_set(tmp_path / "tc", config), n_layers=L, d_model=D)


def test_tfx_writes_config_yaml_with_safe_dump(tmp_path):
    import yaml

    from tfx_cli.core.features.transcoder_set import HEADER, config_text

    text = config_text(2, "mlp.hook_in", "gpt2")
    assert text.startswith(HEADER)
    assert yaml.safe_load(text) == {
        "model_kind": "transcoder_set", "model_name": "gpt2",
        "feature_input_hook": "mlp.hook_in", "feature_output_hook": "hook_mlp_out",
        "transcoders": ["layer_0.safetensors", "layer_1.safetensors"]}
    # a model name YAML would read as another type stays a string
    assert yaml.safe_load(config_text(1, "hook_resid_mid", "1.0"))["model_name"] == "1.0"


def _gemma_scope_2(folder: Path, skip: bool) -> tuple[Path, list[dict]]:
    """A set in Gemma Scope 2's published transcoder layout (circuit-tracer's
    load_gemma_scope_2_transcoder reads it): per layer a folder
    transcoder_all/layer_{i}_width_16k_l0_small[_affine]/params.safetensors of lower-case
    tensors, w_enc (D, F), w_dec (F, D), b_enc, b_dec, threshold and, in an affine set,
    affine_skip_connection (D, D), which the input multiplies as it is."""
    layers = []
    names = []
    for i in range(L):
        g = torch.Generator().manual_seed(40 + i)
        t = {"w_enc": torch.randn(D, F, generator=g) / 4, "w_dec": torch.randn(F, D, generator=g),
             "b_enc": torch.randn(F, generator=g) * 0.1, "b_dec": torch.randn(D, generator=g),
             "threshold": torch.rand(F, generator=g) * 0.3 + 0.01}
        if skip:
            t["affine_skip_connection"] = torch.randn(D, D, generator=g) / 10
        name = f"transcoder_all/layer_{i}_width_16k_l0_small{'_affine' if skip else ''}"
        (folder / name).mkdir(parents=True)
        save_file(t, str(folder / name / "params.safetensors"))
        layers.append({k: v.double().numpy() for k, v in t.items()})
        names.append(name + "/params.safetensors")
    (folder / "config.yaml").write_text(
        "model_kind: transcoder_set\nfeature_input_hook: hook_resid_mid\n"
        f"feature_output_hook: hook_mlp_out\ntranscoders: {json.dumps(names)}\n")
    return folder, layers


@pytest.mark.parametrize("skip", [False, True], ids=["plain", "affine"])
@pytest.mark.parametrize("listed", ["files", "folders"])
def test_gemma_scope_2_transcoders_read_as_their_reference_computes(tmp_path, skip, listed):
    folder, want = _gemma_scope_2(tmp_path / "gs2", skip)
    if listed == "folders":  # the folder of each params.safetensors
        config = (folder / "config.yaml").read_text().replace("/params.safetensors", "")
        (folder / "config.yaml").write_text(config)
    tc = read_transcoders(folder, n_layers=L, d_model=D)
    assert tc.site == "resid_mid" and tc.activation == "jumprelu" and tc.has_skip == skip
    x = np.random.default_rng(1).standard_normal((7, D))
    for i, w in enumerate(want):
        # Gemma Scope 2's JumpReLU: x·w_enc + b_enc, kept above the threshold
        pre = x @ w["w_enc"] + w["b_enc"]
        f = np.where(pre > w["threshold"], np.maximum(pre, 0), 0)
        y = f @ w["w_dec"] + w["b_dec"] + (x @ w["affine_skip_connection"] if skip else 0)
        xt = torch.tensor(x, dtype=torch.float32)
        got_f = tc.encode(i, xt)
        assert 0 < int((got_f != 0).sum()) < got_f.numel()
        assert np.abs(got_f.double().numpy() - f).max() <= 1e-5 * max(1, np.abs(f).max())
        got_y = tc.decode(i, got_f, xt).double().numpy()
        assert np.abs(got_y - y).max() <= 1e-5 * max(1, np.abs(y).max())


def test_gemma_scope_1_npz_and_saelens_folders_read_as_the_same_set(tmp_path):
    ct = _set(tmp_path / "ct", jump=True)
    npz, saelens = tmp_path / "npz", tmp_path / "saelens"
    for folder in (npz, saelens):
        folder.mkdir()
    names = []
    for i in range(L):
        t = _layer(i, jump=True)
        ours = {"W_enc": t["W_enc"].T.contiguous(), "W_dec": t["W_dec"], "b_enc": t["b_enc"],
                "b_dec": t["b_dec"], "threshold": t["activation_function.threshold"]}
        np.savez(npz / f"params_{i}.npz", **{k: v.numpy() for k, v in ours.items()})
        (saelens / f"l{i}").mkdir()
        save_file(ours, str(saelens / f"l{i}" / "sae_weights.safetensors"))
        (saelens / f"l{i}" / "cfg.json").write_text(json.dumps({
            "architecture": "jumprelu_transcoder", "d_in": D, "d_sae": F, "d_out": D,
            "metadata": {"hook_name": f"blocks.{i}.hook_mlp_in",
                         "hook_name_out": f"blocks.{i}.hook_mlp_out"}}))
        names.append(i)
    for folder, entry in ((npz, "params_{}.npz"), (saelens, "l{}")):
        (folder / "config.yaml").write_text(BLOCK.replace("layer_0.safetensors", entry.format(0))
                                            .replace("layer_1.safetensors", entry.format(1)))
    want = read_transcoders(ct, n_layers=L, d_model=D)
    for folder in (npz, saelens):
        _same_sets(want, read_transcoders(folder, n_layers=L, d_model=D))


def test_each_layers_activation_is_an_architecture_class(tmp_path):
    relu = read_transcoders(_set(tmp_path / "relu"), n_layers=L, d_model=D)
    jump = read_transcoders(_set(tmp_path / "jump", jump=True), n_layers=L, d_model=D)
    assert all(type(k) is arch.ReLU for k in relu.kinds) and relu.activation == "relu"
    assert all(type(k) is arch.CircuitTracerJumpReLU for k in jump.kinds)
    assert arch.CircuitTracerJumpReLU in arch.KINDS
    # circuit-tracer's JumpReLU keeps pre where pre > θ, below 0 too when θ is negative
    kind = jump.kinds[0]
    kind.threshold = torch.full((F,), -1.0)
    pre = torch.full((1, F), -0.5)
    assert torch.equal(jump.activate(0, pre), pre)
    assert torch.equal(arch.JumpReLU.activate(kind, pre, None), torch.zeros_like(pre))


def test_the_content_hash_follows_the_files_not_the_path(tmp_path):
    a = read_transcoders(_set(tmp_path / "tc"), n_layers=L, d_model=D)
    shutil.copytree(tmp_path / "tc", tmp_path / "moved")
    moved = read_transcoders(tmp_path / "moved", n_layers=L, d_model=D)
    assert a.sha256() == moved.sha256() and a.sha256(1) == moved.sha256(1)
    save_file(_layer(7), str(tmp_path / "tc" / "layer_1.safetensors"))
    b = read_transcoders(tmp_path / "tc", n_layers=L, d_model=D)
    assert b.sha256() != a.sha256() and b.sha256(1) != a.sha256(1)
    assert b.sha256(0) == a.sha256(0)


# -- damage: refused by name, never an internal error -----------------------------------------
def _damaged(rng: random.Random, folder: Path) -> str:
    """One random change to a set's files; what was done."""
    files = sorted(p for p in folder.iterdir() if p.is_file())
    path = rng.choice(files)
    data = bytearray(path.read_bytes())
    how = rng.choice(["cut", "flip", "insert", "empty", "garbage-line", "swap-key"])
    if how == "cut":
        data = data[:rng.randrange(len(data))]
    elif how == "flip":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif how == "insert":
        at = rng.randrange(len(data))
        data[at:at] = bytes(rng.choice(b"{}[]:-&*!%@`'\"\n\t\x00") for _ in range(rng.randint(1, 6)))
    elif how == "empty":
        data = bytearray()
    elif how == "garbage-line":
        data += rng.choice([b"\n: :\n", b"\n- - -\n  x\n", b"\n\x00\xff\n", b"\nkey: [\n"])
    else:
        text = bytes(data).replace(b"W_enc", b"W_xyz", 1).replace(b"mlp.hook_in", b"mlp.hoo", 1)
        data = bytearray(text)
    path.write_bytes(bytes(data))
    return f"{how} {path.name}"


def _any_layout(folder: Path, trial: int) -> Path:
    """circuit-tracer's files (ReLU, JumpReLU, with a skip path), Gemma Scope's .npz files
    or a cross-layer transcoder, by turns."""
    from circuit_makers import write_clt, write_transcoders

    if trial % 5 == 3:
        return write_transcoders(folder, L, D, F, npz=True, hook_in="mlp.hook_in", seed=trial)
    if trial % 5 == 4:
        return write_clt(folder, L, D, F, seed=trial)
    return _set(folder, jump=trial % 2 == 0, skip=trial % 3 == 0)


def test_random_damage_to_a_set_is_refused_by_name(tmp_path):
    rng = random.Random(0)
    kinds = set()
    for trial in range(150):
        folder = _any_layout(tmp_path / f"t{trial}", trial)
        done = _damaged(rng, folder)
        try:
            tc = read_transcoders(folder, n_layers=L, d_model=D)
        except TfxError as exc:  # exit 2, one line
            assert exc.message and "\n" not in exc.message, done
            kinds.add("refused")
            continue
        x = torch.randn(3, D)
        assert bool(torch.isfinite(tc.decode(0, tc.encode(0, x), x)).all()), done
        kinds.add("read")
    assert kinds == {"refused", "read"}  # both outcomes were drawn


def test_damage_through_the_cli_exits_2_never_1(tmp_path):
    rng = random.Random(1)
    tiny = ["-c", "gpt2", "--layers", "2", "--d-model", str(D), "--heads", "2"]
    for trial in range(12):
        folder = _set(tmp_path / f"t{trial}")
        done = _damaged(rng, folder)
        out = CliRunner().invoke(app, ["graph", "a b c d", *tiny, "--transcoders", str(folder),
                                       "--json"], env={"TFX_QUIET": "1"})
        assert out.exit_code in (0, 2), (done, out.output)
        if out.exit_code == 2:
            assert out.stderr.count("\n") == 1 and "internal error" not in out.stderr, done


def test_files_tfx_writes_get_one_mode(tmp_path):
    """layer files, config.yaml and the run's state get the umask's permissions."""
    from collect_folders import hand_collected  # noqa: F401  (tests/ on the path)

    from tfx_cli import api

    corpus = tmp_path / "docs.txt"
    corpus.write_text("the cat sat on the mat and the dog ran far away from it\n" * 20)
    api.collect(corpus, select=["blocks.*.ln2.out", "blocks.*.ffn.out"], output=tmp_path / "a",
                config="gpt2", layers=2, d_model=D, heads=2, max_tokens=300)
    old = os.umask(0o022)
    try:
        api.train_transcoder(tmp_path / "a", layer="all", output=tmp_path / "tc", l1=1e-3,
                             latents=F, batch_size=32, steps=5, score_tokens=0)
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path / "tc").as_posix(): p.stat().st_mode & 0o777
             for p in (tmp_path / "tc").rglob("*") if p.is_file()}
    assert {"layer_0.safetensors", "layer_1.safetensors", "config.yaml"} <= set(modes)
    assert set(modes.values()) == {0o644}, modes
