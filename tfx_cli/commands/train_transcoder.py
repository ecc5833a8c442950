"""`tfx train-transcoder COLLECT_DIR --layer I -o DIR`: per-layer transcoders trained on
collected MLP input/output pairs, written in circuit-tracer's layout."""
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..options import command

LayerOpt = Annotated[Optional[List[str]], typer.Option(
    "--layer", "--layers", metavar="I", show_default=False,
    help="The layer to train (repeatable), a range 0:4, a list 0,3, or all.")]
InputSiteOpt = Annotated[str, typer.Option(
    "--input-site", metavar="SITE",
    help="What the transcoders read in each block: ln2.out (the MLP's input, "
         "circuit-tracer's mlp.hook_in) or resid_mid (hook_resid_mid).")]
SkipOpt = Annotated[bool, typer.Option(
    "--skip", help="Add a linear skip path x·W_skipᵀ (W_skip (D, D)) to each transcoder.")]
JumpReLUOpt = Annotated[Optional[float], typer.Option(
    "--jumprelu", metavar="COEF", show_default=False,
    help="Train JumpReLU transcoders with this L0 penalty (straight-through threshold "
         "gradients; circuit-tracer loads the threshold).")]


@command("training", "json", "precision", "force")
def train_transcoder(
    *, collect: Annotated[Optional[Path], typer.Argument(
        metavar="COLLECT_DIR", show_default=False,
        help="A folder written by tfx collect holding both sites of each layer.")] = None,
    layer: LayerOpt = None,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", metavar="DIR", show_default=False,
        help="The transcoder set's folder (a killed run in it is continued).")] = None,
    input_site: InputSiteOpt = "ln2.out",
    skip: SkipOpt = False,
    jumprelu: JumpReLUOpt = None,
    batch_size, seed, score_tokens, training, json, precision, force,
) -> None:
    """Train per-layer transcoders on a collect folder's MLP input/output pairs and write
    them in circuit-tracer's layout (read by circuit-tracer's load_transcoder_set).

    Each layer's transcoder reads blocks.I.ln2.out (or --input-site resid_mid) and
    reconstructs the MLP's output blocks.I.ffn.out: f = act(x·W_encᵀ + b_enc),
    ŷ = f·W_dec + b_dec (+ x·W_skipᵀ with --skip), trained as train-sae trains an SAE
    (TopK by default, --l1 for ReLU, --jumprelu for JumpReLU; Adam; checkpoints: a killed
    run continues when the same command runs again). Collect both sites in one pass:
    tfx collect CORPUS --select 'blocks.*.ln2.out' --select 'blocks.*.ffn.out' -o acts.
    DIR gets layer_I.safetensors (W_enc (F, D), W_dec (F, D), b_enc, b_dec, [W_skip]) per
    layer and, once every layer of the model has one, config.yaml (feature_input_hook,
    feature_output_hook, transcoders:). circuit-tracer 0.5.0 loads ReLU and JumpReLU sets
    (--l1, --jumprelu); it has no TopK loader.

    At the end the collect folder's model is rebuilt from its manifest and, on its last
    windows (--score-tokens; 0 skips), each layer's CE-loss score is measured with its
    MLP alone replaced and, once the whole set exists, the set's with every MLP replaced.

    JSON: result.layers (per layer: fvu on the held-out tokens, l0, dead, losses,
    ce_loss_score), result.ce_loss_score, result.config, result.missing, and every option.

    Examples:

      tfx collect python-docs -w smollm2 --select 'blocks.*.ln2.out' --select 'blocks.*.ffn.out' -o acts --max-tokens 200000

      tfx train-transcoder acts --layers all -o transcoders --l1 3e-4 --latents 4096 --epochs 5

      tfx train-transcoder acts --layer 3 -o transcoders --k 32 --skip --json | jq '.result.layers[0].fvu'
    """
    from .. import api
    from ..errors import UsageError
    from ..render.emit import emit, progress, warn

    if collect is None:
        raise UsageError("COLLECT_DIR is missing: tfx train-transcoder COLLECT_DIR --layer I "
                         "-o DIR (a folder written by tfx collect)")
    result = api.train_transcoder(
        collect, layer=layer, output=output, input_site=input_site, skip=skip,
        jumprelu=jumprelu, batch_size=batch_size, seed=seed, score_tokens=score_tokens,
        force=force, progress=progress, **training)
    emit(result, json=json, precision=precision)
    if result.not_converged:
        warn(result.not_converged)
