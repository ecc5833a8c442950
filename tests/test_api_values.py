"""The API reads values as the command line does (issue 25, item 7): one validation layer
(tfx_cli/values.py, applied by api._options.checked) for both.

A string where a list goes is one item; numbers may come as text; bytes are UTF-8 or
refused by name; None is the default; anything else raises the tfx_cli.errors class and
message the CLI gives for the same value, never a TypeError or AttributeError.
"""
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tfx_cli import api, values
from tfx_cli.cli import app
from tfx_cli.errors import InputTextError, SelectError, TfxError, UsageError

SMALL = dict(config="gpt124m", layers=2, d_model=16, heads=2, tokenizer="byte", context=32)
SMALL_ARGS = ["-c", "gpt124m", "--layers", "2", "--d-model", "16", "--heads", "2",
              "-t", "byte", "--context", "32"]


def cli(*args):
    out = CliRunner().invoke(app, list(args), env={"TFX_QUIET": "1"})
    return out


def cli_json(*args):
    out = cli(*args, "--json")
    assert out.exit_code == 0, out.stderr
    return json.loads(out.stdout)


def test_a_string_is_one_site_not_its_characters():
    one = api.next("hello", ablate="blocks.0.attn.out", **SMALL)
    assert [i.site for i in one.interventions] == ["blocks.0.attn.out"]
    assert one.to_dict() == cli_json("next", "hello", *SMALL_ARGS, "--ablate",
                                     "blocks.0.attn.out")
    # a comma list in one string, as on the command line
    two = api.next("hello", ablate="blocks.0.attn.out,blocks.1.ffn.out", **SMALL)
    assert [i.site for i in two.interventions] == ["blocks.0.attn.out", "blocks.1.ffn.out"]


def test_select_as_one_string_is_one_glob():
    """Also asked for by the features issue; checked without iterating result.tensors."""
    r = api.trace("hello", select="blocks.*.attn.pattern", **SMALL)
    assert r.tensors.names() == ["blocks.0.attn.pattern", "blocks.1.attn.pattern"]
    assert r.to_dict() == cli_json("trace", "hello", *SMALL_ARGS, "-s",
                                   "blocks.*.attn.pattern")
    m = api.load(**SMALL)
    assert m.trace("hello", select="logits").tensors.names() == ["logits"]


def test_numbers_may_come_as_text_and_numpy():
    a = api.next("hello", steer="blocks.1.resid_pre", toward="a", away="b", scale="4",
                 **SMALL)
    b = api.next("hello", steer="blocks.1.resid_pre", toward="a", away="b",
                 scale=np.float32(4.0), **SMALL)
    c = cli_json("next", "hello", *SMALL_ARGS, "--steer", "blocks.1.resid_pre", "--toward",
                 "a", "--away", "b", "--scale", "4")
    assert a.to_dict() == b.to_dict() == c
    assert a.interventions[0].scale == 4.0
    assert api.attend("hello", layer="1", head=np.int64(0), **SMALL).layer == 1


@pytest.mark.parametrize("kwargs, cli_args, error", [
    (dict(scale="x", steer="embed.out", toward="a", away="b"),
     ["--scale", "x", "--steer", "embed.out", "--toward", "a", "--away", "b"],
     "Invalid value for '--scale': 'x' is not a valid float."),
    (dict(candidates="x"), ["--candidates", "x"],
     "Invalid value for '--candidates': 'x' is not a valid int range."),
    (dict(ablate=3), ["--ablate", "3"], "--ablate '3' is not a site"),
    (dict(temperature="warm"), ["--temperature", "warm"],
     "Invalid value for '--temperature': 'warm' is not a valid float."),
])
def test_a_wrong_value_raises_what_the_cli_says(kwargs, cli_args, error):
    with pytest.raises(TfxError) as caught:
        api.next("hello", **kwargs, **SMALL)
    assert caught.value.exit_code == 2
    assert caught.value.message.startswith(error), caught.value.message
    out = cli("next", "hello", *SMALL_ARGS, *cli_args)
    assert out.exit_code == 2 and error in out.stderr, out.stderr


@pytest.mark.parametrize("call", [
    lambda: api.next("hello", steer=["blocks.0.resid_pre", 7], toward="a", away="b", **SMALL),
    lambda: api.next("hello", truncate="yes", **SMALL),
    lambda: api.next("hello", layers=2.5, config="gpt124m", d_model=16, heads=2),
    lambda: api.next("hello", ablate={"blocks.0.attn.out": 1}, **SMALL),
    lambda: api.next(["hello"], **SMALL),
    lambda: api.trace("hello", select=[None], **SMALL),
    lambda: api.generate("hello", max_new_tokens=True, **SMALL),
    lambda: api.load(seed=-1, **{k: v for k, v in SMALL.items()}),
    lambda: api.train(output="", text="x.txt"),
])
def test_wrong_types_raise_tfx_errors_never_type_or_attribute_errors(call):
    with pytest.raises(UsageError):
        call()


def test_none_is_the_default():
    a = api.next("hello", device=None, dtype=None, seed=None, max_memory=None, **SMALL)
    assert a.to_dict() == api.next("hello", **SMALL).to_dict()
    assert a.model.device == "cpu" and a.model.seed == 123


def test_bytes_are_utf8_or_refused_by_name():
    r = api.patch(b"hello", corrupt=b"jello", answer=b"o", wrong="x", **SMALL)
    assert r.input.text == "hello" and r.corrupt.text == "jello"
    with pytest.raises(InputTextError) as caught:
        api.next(b"caf\xe9", **SMALL)
    assert caught.value.message.startswith("TEXT is bytes that are not UTF-8 (byte 3: 0xe9)")
    with pytest.raises(InputTextError):
        api.next("hello", steer="embed.out", toward=b"\xff", away="b", **SMALL)


def test_steer_lists_and_pairs():
    """Item 7's steer=[a, b] (an AttributeError before) is two steers; item 8 below."""
    r = api.next("hello", steer=["blocks.0.resid_pre", "blocks.1.resid_pre"],
                 toward=["a", "c"], away="b", scale=[2, 3], **SMALL)
    got = [(i.site, i.toward, i.away, i.scale) for i in r.interventions]
    assert got == [("blocks.0.resid_pre", "a", "b", 2.0), ("blocks.1.resid_pre", "c", "b", 3.0)]
    with pytest.raises(UsageError) as caught:
        api.next("hello", steer=["embed.out", "blocks.1.resid_pre"], toward=["a", "b", "c"],
                 away="b", **SMALL)
    assert "--steer is given 2 times but --toward 3 times" in caught.value.message


def test_the_checkers_alone():
    assert values.as_names("a, b", "--x") == ["a", "b"]
    assert values.as_names(["a", "b,c"], "--x") == ["a", "b", "c"]
    assert values.as_texts("a, b", "--stop") == ["a, b"]
    assert values.as_int("12", "--n") == 12 and values.as_int(3.0, "--n") == 3
    assert values.as_float(np.float64(0.5), "--p") == 0.5
    assert values.as_flag(np.bool_(True), "--f") is True
    assert values.as_choice("heads", "--site", ["resid_pre", "heads"]) == "heads"
    for bad in (lambda: values.as_names(["a", ""], "--x"), lambda: values.as_int(1.5, "--n"),
                lambda: values.as_int(True, "--n"), lambda: values.as_path("", "--o"),
                lambda: values.as_choice("x", "--site", ["a"]),
                lambda: values.as_float("inf", "--scale", finite=True)):
        with pytest.raises(UsageError):
            bad()
    with pytest.raises(SelectError):  # one glob, which matches nothing: its own message
        api.trace("hello", select="nothing.here", **SMALL)


def test_the_corpus_sae_and_route_functions_read_values_as_the_cli_does():
    """api.scan/top/collect/features/train_sae/route go through the same validation layer:
    digits as text are numbers, a wrong type is the CLI's error class, never a TypeError."""
    from tfx_cli import api
    from tfx_cli.errors import TfxError

    tiny = dict(layers=1, d_model=16, heads=2)
    assert api.scan("python-docs", max_docs="2", **tiny).documents == 2
    for call in (lambda: api.scan("python-docs", max_docs="x", **tiny),
                 lambda: api.top("python-docs", site="blocks.0.ffn.act", k=[1], **tiny),
                 lambda: api.collect("python-docs", select=["blocks.0.resid_out"],
                                     output="acts", batch_size=2.5, **tiny),
                 lambda: api.route("hi", config="tiny-moe", truncate="yes"),
                 lambda: api.train_sae(".", site="blocks.0.resid_out", output="o",
                                       holdout="half")):
        with pytest.raises(TfxError):
            call()


TINY = dict(config="gpt124m", layers=1, d_model=16, heads=2)


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    out = tmp_path_factory.mktemp("collect") / "acts"
    api.collect("python-docs", select=["blocks.0.resid_out", "blocks.0.ffn.act"],
                output=out, max_docs=2, **TINY)
    return out


def test_a_collect_folder_is_a_mapping_of_site_to_rows(collected):
    """`in`, list(), dict(), keys/items, len: a collections.abc.Mapping (each raised
    KeyError: iteration asked for acts[0], acts[1], ...)."""
    from collections.abc import Mapping

    acts = api.activations(collected)
    sites = ["blocks.0.ffn.act", "blocks.0.resid_out"]  # forward order
    assert isinstance(acts, Mapping)
    assert list(acts) == sites == list(acts.keys()) and len(acts) == 2
    assert "blocks.0.resid_out" in acts and "blocks.9.resid_out" not in acts and 0 not in acts
    as_dict = dict(acts)
    assert list(as_dict) == sites
    for site, rows in acts.items():
        assert rows.shape == (acts.n_tokens, 16 if site.endswith("resid_out") else 64)
        np.testing.assert_array_equal(rows, as_dict[site])
    assert acts.get("nothing") is None
    with pytest.raises(KeyError, match="this folder holds"):
        acts["nothing"]
    assert acts == acts and acts != api.activations(collected)  # no array comparisons


def test_units_are_whole_numbers_never_rounded():
    """units=[1.5] ran unit 1 and [1.9, 1] ran [1]: a float unit is refused as the CLI
    refuses it, a list of whole numbers (or numpy's) is the comma list it would type."""
    base = dict(site="blocks.0.ffn.act", k=1, max_docs=2, **TINY)
    for units, shown in (([1.5], "1.5"), ([1.9, 1], "1.9"), ([np.float64(0.5)], "0.5")):
        with pytest.raises(UsageError) as caught:
            api.top("python-docs", units=units, **base)
        assert caught.value.message == (f"Invalid value for '--units': {shown} is not a "
                                        "valid integer.")
    for units in ({"a": 1}, {1, 2}, [], object()):
        with pytest.raises(UsageError, match="--units"):
            api.top("python-docs", units=units, **base)
    listed = api.top("python-docs", units=np.array([3, 1]), **base)
    typed = api.top("python-docs", units="3,1", **base)
    assert [u.unit for u in listed.units] == [u.unit for u in typed.units] == [3, 1]
    assert values.as_units([2.0, 5], "--units") == "2,5" and \
        values.as_units(7, "--units") == "7"


@pytest.mark.parametrize("call, said", [
    (lambda: api.activations(3), "DIR takes a path (str or pathlib.Path), not int 3"),
    (lambda: api.activations(None), "api.activations needs the folder tfx collect wrote"),
    (lambda: api.activations(""), "DIR is empty; give a file or folder name"),
    (lambda: api.features("hi", sae=3, **TINY), "--sae takes a path (str or pathlib.Path), "
                                                "not int 3"),
    (lambda: api.top("python-docs", sae=[1], **TINY), "--sae takes a path"),
    (lambda: api.train_sae(3, site="blocks.0.resid_out", output="o"),
     "COLLECT_DIR takes a path (str or pathlib.Path), not int 3"),
], ids=["activations-int", "activations-none", "activations-empty", "features-sae-int",
        "top-sae-list", "train-sae-int"])
def test_a_folder_of_the_wrong_type_is_the_clis_usage_error(call, said):
    with pytest.raises(UsageError) as caught:
        call()
    assert caught.value.exit_code == 2
    assert caught.value.message.startswith(said), caught.value.message
