"""The bound each parity test holds tfx's logits to, in one place.

A parity test builds a tiny random model of a family with transformers and compares
tfx's logits with transformers' eager forward: the largest absolute difference it allows
is `LOGITS[test file]`, and the test reads it from here (`bound(__file__)`). The site's
family table (docs/generate.py) prints the same figure for each family, so the two cannot
disagree; a family without an entry in TESTS fails tests/test_docs_generated.py.
"""
from pathlib import Path

# max |tfx logits - transformers logits| each test allows
LOGITS = {
    "test_parity_gpt2.py": 1e-4,
    "test_parity_llama.py": 1e-4,
    "test_parity_families.py": 1e-5,
    "test_parity_mlm.py": 1e-4,
    "test_parity_minilm.py": 1e-4,  # BertModel: the last hidden state (no head)
    "test_parity_moe.py": 1e-4,
    "test_parity_seq2seq.py": 1e-5,
    "test_parity_t5.py": 1e-4,
    "test_parity_gptoss.py": 1e-4,
    "test_parity_deepseek.py": 1e-4,
}
PATTERNS = 1e-5  # every attention pattern, in every test

# family (tfx_cli/core/checkpoints/families) -> the test that holds it to transformers
TESTS = {
    "gpt2": "test_parity_gpt2.py", "llama": "test_parity_llama.py",
    "bert": "test_parity_mlm.py", "roberta": "test_parity_mlm.py",
    "modernbert": "test_parity_mlm.py", "olmo2": "test_parity_mlm.py",
    "mistral": "test_parity_families.py", "qwen2": "test_parity_families.py",
    "qwen3": "test_parity_families.py", "gemma2": "test_parity_families.py",
    "gemma3": "test_parity_families.py", "phi3": "test_parity_families.py",
    "gpt_neox": "test_parity_families.py",
    "marian": "test_parity_seq2seq.py", "bart": "test_parity_seq2seq.py",
    "mbart": "test_parity_seq2seq.py", "t5": "test_parity_t5.py", "umt5": "test_parity_t5.py",
    "mixtral": "test_parity_moe.py", "qwen2_moe": "test_parity_moe.py",
    "qwen3_moe": "test_parity_moe.py", "olmoe": "test_parity_moe.py",
    "gpt_oss": "test_parity_gptoss.py", "deepseek_v3": "test_parity_deepseek.py",
}


def bound(test_file: str) -> float:
    """The logits bound of the test in `test_file` (its __file__)."""
    return LOGITS[Path(test_file).name]


def of_family(name: str) -> tuple[float, str]:
    """(logits bound, test path) for a family."""
    test = TESTS[name]
    return LOGITS[test], f"tests/core/{test}"
