"""One small module per subcommand: parse -> core -> render.emit.

COMMANDS is the registry `cli.py` reads: (command name, module, function), in help order.
"""
COMMANDS = [
    ("tokenize", "tokenize", "tokenize"),
    ("embed", "embed", "embed"),
    ("posenc", "posenc", "posenc"),
    ("attend", "attend", "attend"),
    ("layernorm", "layernorm", "layernorm"),
    ("ffn", "ffn", "ffn"),
    ("trace", "trace", "trace"),
    ("configs", "configs", "configs"),
    ("count-params", "count_params", "count_params"),
    ("generate", "generate", "generate"),
    ("next", "next", "next_token"),
    ("lens", "lens", "lens"),
    ("report", "report", "report"),
]
