"""The core: torch and numpy only, never typer or rich.

OpenMP worker threads normally spin for a while after each parallel op. tfx runs many
small ops with Python in between (every Tap, every decoding step), and on a machine whose
cores are shared the spinning workers take the CPU from the Python thread: decoding ran
3-4x slower here. Sleeping workers cost a few microseconds per op instead. Set before
torch loads (the OpenMP runtime reads it once); a user's own setting wins.
"""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
