"""What test_fuzz_corpus.py reads and writes: the tiny model, corpora, prompt pairs, a
collect folder and an SAE made once, odd files beside them, and HuggingFace configs
changed at one key for count-params --config."""
import json
from pathlib import Path

from hypothesis import strategies as st

from tfx_cli import api

pick = st.sampled_from
GPT_KW = dict(config="gpt124m", layers=1, d_model=16, heads=2, tokenizer="byte", context=32)
LLAMA_LIKE = {"vocab_size": 256, "context_length": 32, "d_model": 8, "n_heads": 2,
              "n_kv_heads": 1, "n_layers": 1, "d_ff": 12, "norm": "rmsnorm",
              "positional": "rope", "activation": "swiglu", "tokenizer": "byte"}
HF_MOE = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
          "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "max_position_embeddings": 128, "num_local_experts": 4, "num_experts_per_tok": 2,
          "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}
SITE = "blocks.0.resid_out"


# count-params --config: an HF config.json changed at one key (kind, key, value)
CONFIG_EDITS = st.one_of(
    st.tuples(st.just("set"), pick(sorted(HF_MOE)), pick(
        [0, -1, 1, 3, 1.5, "x", "linear", None, [], {}, True, 10**30, "NaN", "Infinity",
         "-Infinity"])),
    st.tuples(st.just("set"), pick(["rope_scaling"]), pick(
        ["linear", {"type": "linear", "factor": 2.0}, {"type": "x"}, {"factor": 0},
         {"type": "yarn", "factor": "Infinity"}, 3])),
    st.tuples(st.just("drop"), pick(sorted(HF_MOE)), st.none()),
    st.tuples(st.just("nest"), st.just(""), pick([10, 1000, 100000])),
    st.tuples(st.just("none"), st.just(""), st.none()))


def config_text(edit) -> str:
    kind, key, value = edit
    if kind == "nest":
        return "[" * value + "]" * value
    cfg = dict(HF_MOE)
    if kind == "set":
        cfg[key] = value
    elif kind == "drop":
        cfg.pop(key)
    text = json.dumps(cfg)
    for word in ("NaN", "Infinity", "-Infinity"):  # JSON5-ish constants Python reads
        text = text.replace(f'"{word}"', word)
    return text


# -- the places the commands read and write ---------------------------------------------
LINES = ["you win or you die", "the cat sat on the mat", "hello world, hello again",
         "When you play the game of thrones", "a b c d e f g h i j", "one two three four",
         "Mary and John went to the store", "the quick brown fox jumps over the dog"] * 3
PAIRS = [{"clean": "a cat", "corrupt": "a hat", "answer": "s", "wrong": "x"},
         {"clean": "a bat", "corrupt": "a rat", "answer": "s", "wrong": "e"}]


def make_places(root: Path) -> dict:
    out = root / "out"
    out.mkdir()
    (root / "corpus.txt").write_text("\n".join(LINES), encoding="utf-8")
    (root / "corpus.jsonl").write_text(
        "\n".join(json.dumps({"text": t, "body": 3}) for t in LINES), encoding="utf-8")
    (root / "odd.jsonl").write_text('[1, 2]\n{"text": 5}\n{"text": null}\n"x"\n{"te',
                                    encoding="utf-8")
    (root / "bom.txt").write_bytes("\ufeffyou win\n".encode("utf-8"))
    (root / "empty.txt").write_text("", encoding="utf-8")
    (root / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (root / "docs").mkdir()
    for i, line in enumerate(LINES[:4]):
        (root / "docs" / f"{i}.txt").write_text(line, encoding="utf-8")
    (root / "pairs.jsonl").write_text("\n".join(map(json.dumps, PAIRS)), encoding="utf-8")
    (root / "badpairs.jsonl").write_text(
        '{"clean": "ab", "corrupt": "abc", "answer": "x", "wrong": "y"}\n'
        '{"clean": "ab", "corrupt": "cd", "answer": "xyz", "wrong": 3}\n[]\n', encoding="utf-8")
    (root / "llama.json").write_text(json.dumps(LLAMA_LIKE), encoding="utf-8")
    (root / "bad.json").write_text('{"d_model": 8,', encoding="utf-8")
    (root / "taken").mkdir()
    (root / "taken" / "mine.txt").write_text("the user's own file", encoding="utf-8")
    (root / "afile.txt").write_text("a file, not a folder", encoding="utf-8")
    (root / "badsae").mkdir()
    (root / "badsae" / "cfg.json").write_text('{"d_in": 16, "d_sae": 0}', encoding="utf-8")
    (root / "badsae" / "sae_weights.safetensors").write_bytes(b"\x08\x00\x00\x00garbage")
    api.collect(str(root / "corpus.txt"), select=[SITE], output=str(root / "acts"), **GPT_KW)
    api.train_sae(str(root / "acts"), site=SITE, output=str(root / "sae"), latents=16, k=2,
                  steps=2, batch_size=8)
    return {"CORPUS": root / "corpus.txt", "JSONL": root / "corpus.jsonl",
            "ODDJSONL": root / "odd.jsonl", "BOMTXT": root / "bom.txt",
            "EMPTY": root / "empty.txt", "BINARY": root / "binary.txt",
            "FOLDER": root / "docs", "PAIRS": root / "pairs.jsonl",
            "BADPAIRS": root / "badpairs.jsonl", "LLAMA_CONFIG": root / "llama.json",
            "BADJSON": root / "bad.json", "TAKEN": root / "taken", "AFILE": root / "afile.txt",
            "BADSAE": root / "badsae", "ACTS": root / "acts", "SAE": root / "sae",
            "OUT": out}
