"""What the commands compute: one module per kind of question asked of a loaded model.

`common.py` (encode a text, check a run against the budget, run the forward recording
only what is asked), `stages.py` (trace, embed, posenc, layernorm, ffn, count-params
--verify), `attend.py`, `report.py`; decoding in `sampling.py` (filters of one logits
row), `decode.py` (the loop and its KV cache) and `generate.py` (generate, next, lens),
`fillmask.py` (next on a masked LM, and what a masked LM or a causal model refuses);
interventions in `sites.py` (sites, ablation, steering), `patching.py` and
`attribution.py`; `train.py` (tfx train) and `inputs.py` (attend --inputs, hand-made
matrices). Each returns a typed result from core/results.

May import: core.load (a loaded model), core.model, core.tokenizers, and the pure
modules below them. Never checkpoints directly, never typer or rich.
"""
