"""One small module per subcommand: parse -> core -> render.emit.

COMMANDS is the registry `cli.py` reads: (command name, module, function), in help order.
"""
COMMANDS = [
    ("tokenize", "tokenize", "tokenize"),
]
