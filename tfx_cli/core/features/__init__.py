"""Features: sparse autoencoders (SAEs) and transcoders trained on a site's activations.

What lives here: reading SAE folders (formats.py: SAELens's cfg.json + sae_weights.
safetensors, Gemma Scope's params.npz, Gemma Scope 2's params.safetensors, tfx's own
tfx-sae.json), the hook names they use mapped onto tfx's trace names (hooks.py), one
class per SAE architecture, its tensors and encoder (architectures.py), the SAE
as tfx runs it (sae.py: encode, decode, the change of a site that a change of features
makes), the numbers an SAE is judged by (metrics.py: FVU, L0, dead features) and
writing SAELens's and tfx's folders (write.py), and training an SAE on a collect
folder's rows (trainer.py: parameters, Adam, the hand-written TopK/ReLU step;
training.py: `tfx train-sae`'s run, checkpoints and resumption; transcoders.py:
`tfx train-transcoder`'s per-layer runs), and the transcoder set as one type
(transcoder_set.py: read from circuit-tracer's, Gemma Scope's and SAELens's layouts,
written in tfx's, its hooks mapped to sites, encoded and decoded by architectures.py's
classes), which circuits, datasets and the trainer all hold. The collect folder
comes in opened (core.datasets.read.Activations, opened by the API): this layer sits
below the datasets layer and does not import it. Running an SAE on a model's text (the `features`
command, features as intervention sites) is analysis's (core/analysis/features.py).

May import: torch, numpy, safetensors, PyYAML, errors, core.trace, core.progress,
core.outputs and core.results; never a model, a
checkpoint reader, typer or rich. Nothing here reads a model: the checks that an SAE
fits one are made where the two meet (core/analysis/features.py).
"""
from __future__ import annotations

from .formats import SAEFile, read_sae, site_needed
from . import metrics
from .hooks import hook_name, tfx_site
from .sae import SAE, site_width
from .write import write_saelens, write_tfx

__all__ = ["SAE", "SAEFile", "read_sae", "site_needed", "site_width", "tfx_site",
           "hook_name", "metrics", "write_saelens", "write_tfx"]
