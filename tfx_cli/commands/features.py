"""`tfx features TEXT --sae DIR`: a sparse autoencoder's features on every token."""
from ..options import command, read_text


@command("truncate", "display", "plot", "force", "model")
def features(*, text, sae, sae_site, per_token, truncate, display, plot, force, model,
             encoding) -> None:
    """Show a sparse autoencoder's features on TEXT: per token the most active features,
    how many fire (L0), and how well the SAE reconstructs its site.

    The SAE reads one site of the model (its folder says which: SAELens's cfg.json
    hook_name, a TransformerLens name such as blocks.3.hook_resid_post that tfx maps to
    blocks.3.resid_out; or --sae-site): x' = x − b_dec (when the SAE subtracts it),
    f = act(x'·W_enc + b_enc) with ReLU, JumpReLU (f where pre > threshold) or TopK (the k
    largest), and the reconstruction x̂ = f·W_dec + b_dec. The table is tokens × their
    top features (index and activation); below it the fraction of variance unexplained
    (Σ|x − x̂|² / Σ|x − mean x|² over the text), the mean cosine of x and x̂ and the
    error's norm.

    JSON: tensors features.acts (T, F) every feature's activation, features.recon and
    features.error (T, width); result.positions (per token: l0, norm, error_norm, cosine,
    top), result.fvu, l0_mean, cosine_mean, top_features, dead, result.sae.

    Examples:

      tfx features "The capital of France is" -w smollm2 --sae my-sae

      tfx features "Hello, I am" --sae gemma-scope/layer_5 --sae-site blocks.5.resid_out --json | jq .result.fvu

      tfx features "When you play game of thrones" -c gpt2 --sae my-sae --plot features.png
    """
    from .. import api
    from ..errors import UsageError
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to

    check_plot(plot, force)
    if sae is None:
        raise UsageError("--sae is missing; tfx features TEXT --sae DIR (an SAE folder: "
                         "SAELens's cfg.json + sae_weights.safetensors, params.npz, ...)")
    result = api.features(read_text(text, encoding=encoding), sae=sae, sae_site=sae_site,
                          per_token=per_token, truncate=truncate, **model)
    plot_to(result, plot, force)  # the same result the view and JSON read
    emit(result, **display)
