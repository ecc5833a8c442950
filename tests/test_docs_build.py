"""The documentation site: `mkdocs build --strict` passes (no broken link, no missing page,
no missing anchor), and every section the README had before the site existed has a home
on one of its pages."""
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from needs import need

ROOT = Path(__file__).resolve().parents[1]

# Every heading of README.md as it was when it held the whole manual, and the page that now
# holds it (under the same title). Frozen: a section dropped from the site fails here.
HOMES = [
    ('tfx — look inside transformers', 'index.md'),
    ('Quick start', 'getting-started.md'),
    ('What it does', 'index.md'),
    ('From Python', 'notebook.md'),
    ('How the API reads what it is given', 'notebook.md'),
    ('In a notebook', 'notebook.md'),
    ('Trace names', 'concepts.md'),
    ('Configs', 'models.md'),
    ('Counting any config', 'models.md'),
    ('Real weights (optional extras)', 'models.md'),
    ('Model families', 'models.md'),
    ('Precision, devices and models larger than memory', 'larger-than-memory.md'),
    ('NaN and infinity: stopped where they arise', 'larger-than-memory.md'),
    ('Long work and large files', 'larger-than-memory.md'),
    ('Streaming a checkpoint from disk', 'larger-than-memory.md'),
    ('Beyond one machine', 'ray.md'),
    ('Pictures', 'stages.md'),
    ('Encoder–decoder models', 'models.md'),
    ('Masked language models (fill-mask)', 'models.md'),
    ('Mixtures of experts', 'models.md'),
    ('Attention on your own matrices', 'stages.md'),
    ('Interventions', 'interventions.md'),
    ('Worked example: where does SmolLM2 keep "France"?', 'interventions.md'),
    ('Interventions on an encoder–decoder', 'interventions.md'),
    ('Datasets', 'datasets.md'),
    ('Worked example: SmolLM2 over python-docs', 'datasets.md'),
    ('Reading a collect folder without tfx', 'datasets.md'),
    ('On a Ray cluster', 'ray.md'),
    ('Features (sparse autoencoders)', 'features.md'),
    ('Worked example: a hand-made SAE on SmolLM2', 'features.md'),
    ('Max-activating examples of features: `tfx top --sae`', 'features.md'),
    ('Training an SAE', 'features.md'),
    ('Errors', 'errors.md'),
    ('What tfx does with bad input', 'errors.md'),
    ('Reproducibility', 'concepts.md'),
    ('Benchmarks', 'benchmarks.md'),
    ('Where the code is', 'contributing.md'),]


def headings(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {m.group(1).strip() for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_every_heading_the_readme_had_has_a_home():
    missing = [(title, page) for title, page in HOMES
               if title not in headings(ROOT / "docs" / page)]
    assert not missing, f"sections without a home in docs/: {missing}"


def test_the_readme_is_short_and_links_into_the_site():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    links = set(re.findall(r"\]\((docs/[\w./-]+?\.md)\)", readme))
    assert {f"docs/{page}" for _, page in HOMES} - {"docs/index.md"} <= links
    assert all((ROOT / link).is_file() for link in links)


def test_every_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages <= set(re.findall(r"([\w-]+\.md)", nav))


def test_mkdocs_build_strict(tmp_path):
    """The site builds with no warning: strict mode turns a link to a missing page or a
    missing heading, or a page left out of the nav, into a failure."""
    need("mkdocs", "pip install -e '.[docs]'")
    need("material", "pip install -e '.[docs]'")
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(tmp_path / "site")],
        capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1",
                                                          "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()
    for _, page in HOMES:
        assert (tmp_path / "site" / page.removesuffix(".md") / "index.html").is_file() \
            or page == "index.md"
    print(f"mkdocs build --strict: {time.monotonic() - started:.1f} s")


def test_a_broken_link_fails_the_strict_build(tmp_path):
    """The check above can fail: the same build over a copy with one link to a heading that
    does not exist stops."""
    need("mkdocs", "pip install -e '.[docs]'")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    (tmp_path / "tests").mkdir()  # the family table's parity bounds (docs/generate.py)
    shutil.copy(ROOT / "tests" / "parity.py", tmp_path / "tests" / "parity.py")
    shutil.copytree(ROOT / "samples", tmp_path / "samples")  # the pictures' corpus, the notebook
    page = tmp_path / "docs" / "generation.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n[gone](models.md#no-such-section)\n",
                    encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml"),
         "-d", str(tmp_path / "site")],
        capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1",
                                                          "PATH": "/usr/bin:/bin"})
    assert out.returncode != 0 and "no-such-section" in out.stderr
