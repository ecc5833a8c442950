"""The feed-forward sublayer: two linears around an activation, or a gated one."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ModelConfig
from .taps import Tap


class FeedForward(nn.Module):
    """x W1 -> activation -> W2; or gated (SwiGLU: SiLU, GeGLU: GELU-tanh): the gate
    x W_gate goes through the activation and multiplies x W_up, then W_down."""

    def __init__(self, cfg: ModelConfig, width: int | None = None):
        """width: the hidden width (default d_ff; an MoE's shared expert has its own)."""
        super().__init__()
        self.activation = cfg.activation
        self.gated = cfg.activation in GATED
        bias = cfg.proj_bias
        width = width or cfg.d_ff
        if self.gated:
            self.gate_proj = nn.Linear(cfg.d_model, width, bias=bias)
        self.fc1 = nn.Linear(cfg.d_model, width, bias=bias)  # "up" when gated
        self.fc2 = nn.Linear(width, cfg.d_model, bias=bias)  # "down"
        self.hidden, self.act, self.out = Tap("T", "F"), Tap("T", "F"), Tap("T", "C")
        if self.gated:
            self.up = Tap("T", "F")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate = self.hidden(self.gate_proj(x))  # (B, T, F), pre-activation of the gate
            act = self.act(self.activate(gate) * self.up(self.fc1(x)))
        else:
            hidden = self.hidden(self.fc1(x))  # (B, T, F)
            act = self.act(self.activate(hidden))
        return self.out(self.fc2(act))

    def activate(self, hidden: torch.Tensor) -> torch.Tensor:
        return activate(self.activation, hidden)


def activate(activation: str, hidden: torch.Tensor) -> torch.Tensor:
    """An activation by its config name (a gated one's gate)."""
    if activation == "relu":
        return F.relu(hidden)
    if activation in ("gelu", "geglu_exact"):
        return F.gelu(hidden)  # exact (erf), as BERT and nanoGPT; ModernBERT's GLU gate
    if activation in ("swiglu", "silu"):
        return F.silu(hidden)  # the gate of Llama's SwiGLU; Marian's plain "swish"
    return F.gelu(hidden, approximate="tanh")  # GPT-2, seed 004; Gemma's GeGLU gate


GATED = ("swiglu", "geglu", "geglu_exact")
