"""`tfx trace TEXT --select GLOB`: the whole forward pass, recording what is selected."""
from ..options import command, read_text, split_list


@command("truncate", "edits", "display", "plot", "force", "model")
def trace(*, text, select, values, target, truncate, edits, display, plot, force, model,
          encoding) -> None:
    """Run the whole forward pass on TEXT, record only the names --select picks, and show
    them as a tree with dims and shapes (values with --values; every tensor with --json).

    Names follow the model (`embed.out`, `blocks.0.attn.pattern`, `logits`); `*` crosses
    dots. A glob that matches nothing is an error that lists the valid names.

    Examples:

      tfx trace "Hello, I am" --select logits --json | jq '.tensors.logits.shape'

      tfx trace "When you play game of thrones" --config toy -s 'blocks.0.attn.*' --values

      tfx trace "Hello, I am" -s logits --steer blocks.6.resid_pre --toward " love" --away " hate" --scale 4

      tfx trace "Hello, I am" -s 'blocks.3.*' --steer-feature my-sae:12 --scale 8
    """
    from .. import api
    from ..render.emit import emit
    from ..render.plot import check_plot, plot_to

    check_plot(plot, force)

    result = api.trace(read_text(text, encoding=encoding), select=split_list(select, "--select"),
                       truncate=truncate, target=target,
                       **edits,
                       **model)
    plot_to(result, plot, force)  # the same result the view and JSON read
    emit(result, **display, values=values)
