"""The core: what tfx computes, with torch and numpy only; it never draws (no rich), never
parses a command line (no typer) and never prints.

Its rooms, bottom to top (import-linter's contracts in pyproject.toml hold the arrows one
way; each folder's __init__ says what it may import): pure-Python modules that commands
without a model run on (config.py and presets.py: ModelConfig and the presets; spec.py:
what the user asked for; params.py, memory.py; trace.py; results/: the typed results;
packages.py, progress.py); checkpoints/ (files -> config and named tensors); model/ (the
one Transformer) and tokenizers/; load.py (where those three meet); analysis/ (what each
command computes). Each module may import the rooms below it, never one above.

OpenMP worker threads normally spin for a while after each parallel op. tfx runs many
small ops with Python in between (every Tap, every decoding step), and on a machine whose
cores are shared the spinning workers take the CPU from the Python thread: decoding ran
3-4x slower here. Sleeping workers cost a few microseconds per op instead. Set before
torch loads (the OpenMP runtime reads it once); a user's own setting wins.
"""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
