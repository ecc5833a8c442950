"""What the user sees, drawn from a typed result and never computed: `emit.py` (the only
place that writes stdout: the JSON envelope or a terminal view; warnings and progress on
stderr), `views/` (one terminal view per command, found through tfx_cli/registry.py),
`matrix.py` (the one tensor renderable), `plot.py` (--plot, matplotlib imported lazily),
`report.py` (the HTML page), `jsonout.py`, `grouphelp.py` (tfx --help) and `common.py`
(labels, ranges, safe terminal text shared by all of them).

May import: rich, numpy, the core's results, trace and tokenizers' display helpers, the
registry and errors. Never torch (a view draws what the result holds) and never a
command or the API.
"""
