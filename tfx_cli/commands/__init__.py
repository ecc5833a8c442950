"""One small module per subcommand: parse -> api -> render.emit.

Each module holds one Typer function whose `@command` and bare keywords name the
command's options, each declared in tfx_cli/option_table.py (the command's block, or the
shared ones). It reads the text (stdin for '-'), calls the matching `tfx_cli.api`
function and hands the typed result to `render.emit` (and `--plot`).
tfx_cli/registry.py lists them.

May import: typer, tfx_cli.options, tfx_cli.api, tfx_cli.render and errors, and the
core only for constants; the work itself goes through the API.
"""
