"""One small module per subcommand: parse -> core -> render.emit.

COMMANDS is the registry `cli.py` reads, in help order: (command name, module, function,
summary). The summary is the first paragraph of the function's docstring, kept here so
`tfx --help` lists every command without importing any of them (a test keeps the two
equal); cli.py imports a command's module only when that command runs.
"""
COMMANDS = [
    ("tokenize", "tokenize", "tokenize",
     "Split TEXT into tokens and show each token's id."),
    ("embed", "embed", "embed",
     "Show each token's embedding row, its positional row and their sum (T, C)."),
    ("posenc", "posenc", "posenc",
     "Show the positional encoding for TEXT's positions, or for --length N positions."),
    ("attend", "attend", "attend",
     "Show one layer's attention: Q, K, V, the raw scores QKᵀ, scaled (÷√d_k), masked,"
     " the pattern (softmax, rows sum to 1), the context (pattern·V), the heads joined"
     " and the output projection W_O."),
    ("layernorm", "layernorm", "layernorm",
     "Show one LayerNorm (or RMSNorm): per-token mean and variance, the normalised "
     "rows (mean ≈ 0, variance ≈ 1), γ (scale), β (shift) and the output."),
    ("ffn", "ffn", "ffn",
     "Show one feed-forward sublayer: its input, the hidden pre-activation (T, F), the"
     " activation (ReLU for toy, GELU-tanh for gpt124m, SiLU-gated for SwiGLU) and the"
     " output (T, C)."),
    ("trace", "trace", "trace",
     "Run the whole forward pass on TEXT, record only the names --select picks, and "
     "show them as a tree with dims and shapes (values with --values; every tensor "
     "with --json)."),
    ("configs", "configs", "configs",
     "List the presets: sizes, switches and parameter counts."),
    ("count-params", "count_params", "count_params",
     "Count parameters, weight memory and forward FLOPs per token, from the config "
     "alone."),
    ("generate", "generate", "generate",
     "Continue PROMPT token by token and show each step: the token chosen, its "
     "probability and the most likely alternatives."),
    ("next", "next", "next_token",
     "The model's distribution over the token after TEXT: the most likely tokens with "
     "their logits and probabilities (softmax of the logits)."),
    ("lens", "lens", "lens",
     "Logit lens: what each layer would predict if the model stopped there."),
    ("report", "report", "report",
     "Write one self-contained HTML page: tokens, a layers × heads grid of attention "
     "maps, a clickable head view with hover values, layer-norm statistics, and the "
     "next-token top-k."),
]
