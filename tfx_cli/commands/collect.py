"""`tfx collect CORPUS --select GLOB -o DIR`: an activation dataset on disk."""
from ..options import command, need_corpus, split_list


@command("dataset", "engine", "json", "force", "model")
def collect(*, source, select, output, shard_tokens, dataset, engine, json, force, model,
            encoding) -> None:
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
