"""The order the suite's files run in: the longest first.

The test command hands whole files to pytest-xdist's workers (`--dist loadfile`), one at
a time as each worker comes free, in collection order. A long file collected last leaves
one worker running it alone while the other waits; started first, the short files fill
in around it. The files named here took the longest in `--durations` runs (real Ray
runtimes and clusters, the joined GGUF models against transformers, the bench's child
processes, the fuzzes); only their order changes, never what a test does, and the rest
keep pytest's order.
"""

LONGEST_FIRST = (
    "core/test_ray_engine.py",
    "core/test_gguf_families.py",
    "core/test_ray_leftovers.py",
    "test_golden.py",
    "core/test_interventions_smollm2.py",
    "test_bench_smoke.py",
    "test_docs_examples.py",  # every example of README and docs/, about 40 s of CPU
    "cli/test_fuzz_corpus.py",
    "core/test_params.py",
    "core/test_parity_smollm2.py",
    "core/test_gguf_tokenizers.py",
    "core/test_tokenizers.py",
    "core/test_datasets.py",
)


def pytest_collection_modifyitems(session, config, items):
    root = config.rootpath / "tests"

    def rank(item) -> int:
        try:
            name = item.path.relative_to(root).as_posix()
        except ValueError:
            return len(LONGEST_FIRST)
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file's tests keep their order
