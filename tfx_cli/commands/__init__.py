"""One small module per subcommand: parse -> api -> render.emit.

Each module holds one Typer function whose annotations are the command's options. It
reads the text (stdin for '-'), calls the matching `tfx_cli.api` function and hands the
typed result to `render.emit` (and `--plot`). tfx_cli/registry.py lists them.

May import: typer, tfx_cli.options, tfx_cli.api, tfx_cli.render and errors, and the
core only for constants; the work itself goes through the API.
"""
