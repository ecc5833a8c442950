"""Questions asked of a corpus, not of one text: `tfx scan`, `tfx top`, `tfx collect` and
`tfx patch --pairs`, as one pipeline whatever runs it.

    read (corpus.py) -> tokenize, cut into windows, group into batches (windows.py)
    -> a forward pass recording only what a task asks (tasks.py, scan.py, top.py,
       collect.py, pairs.py: each a pure per-batch function and an associative reduction)
    -> reduce in batch order, or write shards in token order (pipeline.py, store.py)

corpus_runs.py runs scan, top and collect end to end (options checked, the output folder
opened or resumed, the pipeline run, the typed result built); pairs.py runs patch --pairs.

`engines.py` decides only where batches run: `local` in this process, `ray` on Ray Data
actors (ray_engine.py, imported only when asked for); an engine takes a picklable
WorkerSpec (worker.py: the ModelSpec and the task), builds one worker from it per
process, maps batches to partial results and hands them back in batch order, so any
engine gives the same bytes. State lives in the output folder's manifest (store.py):
shards and checkpoints are written to a temporary name and renamed, so a killed run
resumes where it stopped.

May import: core.analysis (encode, run, the patching metric), core.load, core.model,
core.tokenizers, core.features (row_width: the width of a site's rows) and the pure
modules below them; numpy, torch, pyarrow and safetensors; ray (ray_engine.py only,
lazily).
Never typer or rich: progress comes in as a factory (core.progress).
"""
