"""Attribution graphs (circuit tracing): transcoder sets read from disk, the local
replacement model built around a loaded tfx model, the graph of direct effects between
features, error terms, token embeddings and logits (graph.Graph, one object however it
came: a run, or its --save file read back), and its pruning and scores.

Definitions follow circuit-tracer 0.5.0 (Ameisen et al. 2025, "Circuit Tracing"), whose
numbers the parity tests compare against; the code is tfx's own.

May import: core.analysis (encoding a text), core.load's models (run through their taps),
core.results and the error catalogue; nothing above the core (no typer, no rich, no click).
neuronpedia.py, which writes a pruned graph as the JSON file circuit-tracer's frontend and
Neuronpedia open, and graphfile.py, which reads one back, import NumPy but no torch: the
page drawer in render/ may use their node ids, and `tfx graph --open graph.json` loads no
model machinery."""
