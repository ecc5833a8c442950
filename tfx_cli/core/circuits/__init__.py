"""Attribution graphs (circuit tracing): transcoder sets read from disk, the local
replacement model built around a loaded tfx model, the graph of direct effects between
features, error terms, token embeddings and logits, and its pruning and scores.

Definitions follow circuit-tracer 0.5.0 (Ameisen et al. 2025, "Circuit Tracing"), whose
numbers the parity tests compare against; the code is tfx's own."""
