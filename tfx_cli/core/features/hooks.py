"""Which tfx trace name an SAE reads: TransformerLens hook names (what SAELens's cfg.json
calls `hook_name`, older configs `hook_point`) mapped onto tfx's sites. Pure Python.

Only names whose activation tfx computes the same way are mapped; anything else is
refused by name, and `--sae-site` names the site outright.
"""
from __future__ import annotations

import re

from ...errors import SelectError

# TransformerLens's hook -> tfx's name, per block ({i}); the activation is the same
# tensor in both (a block's input, the stream after attention, after the block, a
# sublayer's output, attention's z = pattern · V per head before W_O, the MLP's
# pre-activation and activation).
BLOCK_HOOKS = {
    "hook_resid_pre": "blocks.{i}.resid_pre",
    "hook_resid_mid": "blocks.{i}.resid_mid",
    "hook_resid_post": "blocks.{i}.resid_out",
    "hook_attn_out": "blocks.{i}.attn.out",
    "hook_mlp_out": "blocks.{i}.ffn.out",
    # TransformerLens's hook_mlp_in is the stream before ln2 (transformer_block.py:
    # `mlp_in = self.hook_mlp_in(resid_mid.clone())`, then ln2); the MLP's own input,
    # ln2's output, is circuit-tracer's ReplacementMLP mlp.hook_in
    "hook_mlp_in": "blocks.{i}.resid_mid",
    "mlp.hook_in": "blocks.{i}.ln2.out",
    "mlp.hook_out": "blocks.{i}.ffn.out",
    "attn.hook_z": "blocks.{i}.attn.context",
    "mlp.hook_pre": "blocks.{i}.ffn.hidden",
    "mlp.hook_post": "blocks.{i}.ffn.act",
}
GLOBAL_HOOKS = {"hook_embed": "embed.tok", "hook_pos_embed": "embed.pos"}

# TransformerLens names that have no one tfx tensor, and why.
_UNMAPPED = {
    "attn.hook_result": "tfx keeps the heads' outputs joined (attn.out), not one per head",
    "hook_normalized": "TransformerLens folds the norm's scale into the next weights, so "
                       "its normalised rows are not tfx's ln.out or ln.normed",
    "hook_scale": "a norm's scale is not an activation an SAE reads in tfx",
    "attn.hook_pattern": "an SAE of attention patterns is not supported",
    "attn.hook_attn_scores": "an SAE of attention scores is not supported",
}

_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")


def tfx_site(hook: str, what: str = "the SAE reads") -> str:
    """The tfx trace name of a TransformerLens hook name (a tfx name passes through);
    `what` starts the refusal ("--sae DIR reads", "--sae-site names")."""
    hook = hook.strip()
    if hook in GLOBAL_HOOKS:
        return GLOBAL_HOOKS[hook]
    match = _BLOCK.match(hook)
    if match:
        layer, leaf = match.groups()
        if leaf in BLOCK_HOOKS:
            return BLOCK_HOOKS[leaf].format(i=layer)
        for suffix, why in _UNMAPPED.items():
            if leaf.endswith(suffix):
                raise SelectError(f"{what} {hook}, which tfx does not map: {why}; "
                                  "name the tfx site it reads with --sae-site, e.g. "
                                  f"--sae-site blocks.{layer}.resid_out")
    if "hook_" not in hook:
        return hook  # a tfx name already (blocks.3.resid_out); checked on the model
    raise SelectError(f"{what} {hook}, a hook name tfx does not map (it maps "
                      f"{', '.join(sorted(BLOCK_HOOKS))} of blocks.{{i}}, and "
                      f"{', '.join(GLOBAL_HOOKS)}); name the tfx site with --sae-site, "
                      "e.g. --sae-site blocks.3.resid_out")

def hook_name(site: str) -> str:
    """The TransformerLens hook name of a tfx site, for files other tools read (SAELens's
    cfg.json); a site TransformerLens has no hook for keeps its tfx name."""
    for hook, name in GLOBAL_HOOKS.items():
        if site == name:
            return hook
    match = re.match(r"^blocks\.(\d+)\.(.+)$", site)
    if match:
        for hook, name in BLOCK_HOOKS.items():
            if name == "blocks.{i}." + match.group(2):
                return f"blocks.{match.group(1)}.{hook}"
    return site


__all__ = ["tfx_site", "hook_name", "BLOCK_HOOKS", "GLOBAL_HOOKS"]
