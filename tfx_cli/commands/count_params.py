"""`tfx count-params`: parameters, weight memory and forward FLOPs, from the config alone.

Nothing is built and torch is never imported, unless --verify asks to build the model
(on the meta device) and count its parameters for real. With --weights the architecture
comes from the checkpoint's header; no tensors are read.
"""
from ..options import command


@command("json")
def count_params(*, config, weights, heads, layers, d_model, context, tie, seq_len,
                 vocab_size, verify, json) -> None:
    """Count parameters, weight memory and forward FLOPs per token, from the config alone.

    Tied weights are counted once.
    FLOPs count matmuls only; a multiply-add is 2 FLOPs.
    Attention's QKᵀ and pattern·V are counted as the full T×T product.

    Examples:

      tfx count-params

      tfx count-params --config gpt2-xl --seq-len 128

      tfx count-params --tie --json | jq .result.total

      tfx count-params --weights minilm

      tfx count-params --config smollm2-135m --verify

      tfx count-params --config vaswani --vocab-size 37000 --json | jq .result.total
    """
    from .. import api
    from ..errors import TfxError
    from ..render.emit import emit

    result = api.count_params(config=config, weights=weights, heads=heads, layers=layers,
                              d_model=d_model, context=context, tie=tie, seq_len=seq_len,
                              vocab_size=vocab_size, verify=verify)
    emit(result, json=json)
    if result.verify is not None and not result.verify.verified:
        check = result.verify
        raise TfxError(f"the built model has {check.model_params:,} parameters, the "
                       f"analytic count expects {check.expected:,}; please report this")
