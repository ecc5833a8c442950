"""One small module per subcommand: parse -> api -> render.emit.

Each module holds one Typer function whose annotations are the command's options. It
reads the text (stdin for '-'), calls the matching `tfx_cli.api` function and hands the
typed result to `render.emit` (and `--plot`). tfx_cli/registry.py lists them.
"""
