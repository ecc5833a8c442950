"""`tfx collect CORPUS --select GLOB -o DIR`: an activation dataset on disk."""
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..options import CorpusArg, command, need_corpus, split_list


@command("dataset", "engine", "json", "force", "model")
def collect(
    source: CorpusArg = None,
    select: Annotated[Optional[List[str]], typer.Option(
        "--select", "-s", show_default=False,
        help="Sites to store, names or globs (repeatable, or comma-separated), e.g. "
             "'blocks.*.resid_out'.")] = None,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", metavar="DIR", show_default=False,
        help="The folder to write (created; a folder of the same run is resumed).")] = None,
    shard_tokens: Annotated[Optional[int], typer.Option(
        "--shard-tokens", metavar="N", show_default=False,
        help="Rows (tokens) per shard file (default: about 64 MB of rows).")] = None,
    *, dataset, engine, json, force, model, encoding,
) -> None:
    """Write an activation dataset: DIR/shard-00000.safetensors ... (one 2-D tensor per
    site, rows = tokens in corpus order), DIR/tokens.parquet and DIR/manifest.json.

    Rows are stored in --dtype (float32 by default). tokens.parquet has the columns doc,
    position, token (id), text (the piece), shard and row. numpy/safetensors, pandas,
    DuckDB and Polars read the folder without tfx; api.activations(DIR) opens it as
    arrays by site. A killed run resumes: the same command finishes it, byte for byte.

    Examples:

      tfx collect python-docs -w smollm2 --select 'blocks.*.resid_out' -o acts --max-docs 100

      duckdb -c "select text, count(*) from 'acts/tokens.parquet' group by 1 order by 2 desc limit 5"
    """
    from .. import api
    from ..errors import UsageError
    from ..render.emit import emit

    if output is None:
        raise UsageError("-o DIR is missing: collect writes a folder, e.g. -o acts")
    result = api.collect(need_corpus(source), select=split_list(select, "--select"),
                         output=output, shard_tokens=shard_tokens,
                         **dataset, **engine, **model)
    emit(result, json=json)
