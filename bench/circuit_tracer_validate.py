"""Check a graph file against circuit-tracer's own reader: run with circuit-tracer's venv.

    /work/venvs/circuit-tracer/bin/python bench/circuit_tracer_validate.py GRAPH.json \
        [--record tests/recordings/circuit_tracer/graph_json_validation.json]

1. circuit-tracer 0.5.0's pydantic models (`circuit_tracer.frontend.graph_models.Model`,
   with `Node` and `Link`) accept the file, as circuit-tracer validates what it writes, and
   also in pydantic's strict mode (no type coerced: a layer is a string, a feature an
   integer, a weight a number).
2. Every node id is unique and every link's source and target is a node.
3. circuit-tracer's local server (`circuit_tracer.frontend.local_server.serve`) serves it:
   the file goes into a scratch data folder under its slug, `add_graph_metadata` lists it
   in `graph-metadata.json` as `create_graph_files` does, and the two URLs the frontend
   fetches (`/data/graph-metadata.json`, `/graph_data/SLUG.json`, gzipped past 1 MB) give
   back the metadata and the same document.
4. For scale, the size circuit-tracer's own writer (`model_dump_json(indent=2)`) gives
   the same graph.

Prints one JSON object (validated, versions, sha256 and size of the file, counts); with
--record writes it there too. Exit 1 if a check fails.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import platform
import shutil
import sys
import tempfile
import urllib.request
from importlib.metadata import version
from pathlib import Path


def check_models(doc: dict) -> dict:
    from circuit_tracer.frontend.graph_models import Link, Model

    model = Model.model_validate(doc)
    Model.model_validate(doc, strict=True)
    for link in doc["links"]:
        Link.model_validate(link, strict=True)
    ids = [node["node_id"] for node in doc["nodes"]]
    if len(set(ids)) != len(ids):
        raise AssertionError("node ids repeat")
    known = set(ids)
    dangling = [link for link in doc["links"]
                if link["source"] not in known or link["target"] not in known]
    if dangling:
        raise AssertionError(f"{len(dangling)} links name a missing node: {dangling[:3]}")
    return {"circuit_tracer_indent2_bytes": len(model.model_dump_json(indent=2).encode())}


def _get(url: str):
    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return json.loads(body)


def check_served(path: Path, doc: dict) -> dict:
    from circuit_tracer.frontend.local_server import serve
    from circuit_tracer.frontend.utils import add_graph_metadata

    slug = doc["metadata"]["slug"]
    with tempfile.TemporaryDirectory() as data:
        shutil.copyfile(path, Path(data) / f"{slug}.json")
        add_graph_metadata(doc["metadata"], data)
        server = serve(data_dir=data, port=0)
        try:
            port = server.httpd.server_address[1]
            listed = _get(f"http://127.0.0.1:{port}/data/graph-metadata.json")
            served = _get(f"http://127.0.0.1:{port}/graph_data/{slug}.json")
        finally:
            server.stop()
    if [g["slug"] for g in listed["graphs"]] != [slug]:
        raise AssertionError(f"graph-metadata.json lists {listed['graphs']}")
    if served != doc:
        raise AssertionError("the served document differs from the file")
    return {"served_by_local_server": True}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("graph", type=Path)
    parser.add_argument("--record", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    data = args.graph.read_bytes()
    doc = json.loads(data)
    result = {"file": args.graph.name, "sha256": hashlib.sha256(data).hexdigest(),
              "bytes": len(data), "nodes": len(doc["nodes"]), "links": len(doc["links"]),
              "slug": doc["metadata"]["slug"]}
    try:
        result.update(check_models(doc))
        result.update(check_served(args.graph, doc))
        result["validated"] = True
    except Exception as exc:  # report what failed, as the record's reason
        result.update(validated=False, reason=f"{type(exc).__name__}: {exc}"[:2000])
    result["versions"] = {"circuit-tracer": version("circuit-tracer"),
                          "pydantic": version("pydantic"),
                          "python": platform.python_version()}
    text = json.dumps(result, indent=1, sort_keys=True)
    print(text)
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(text + "\n")
    return 0 if result["validated"] else 1


if __name__ == "__main__":
    sys.exit(main())
