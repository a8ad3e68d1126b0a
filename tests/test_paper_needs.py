"""experiment=paper asks only for what its grid reads, and refuses before any work what it cannot have.

Core 2017 / 2018 re-rank the authors' bundled runs (``rerank.first_stage``): they need no index, so a finished
grid's status is complete without one and ``leakexp index`` builds none.
"""

from __future__ import annotations

import pytest
from conftest import paper_env

from leakexp.stages.cell import grid_cells
from leakexp.cli.main import main
from leakexp.runner.registry import compose
from leakexp.grid.work import STATES, complete, grid_asks, grid_status
from leakexp.runner.registry import runner
from leakexp.runner.store import Store

PAPER_TINY = ["grid.sizes=[1000]", "grid.seeds=[1]", "grid.models=[knrm]"]


@pytest.fixture
def paper(irds_corpora, tmp_path, monkeypatch):
    """experiment=paper over the miniature raw corpora (tests/irds_corpora.py): its data is there, so keys can be
    made (without the files every artifact is "data missing")."""
    return [*paper_env(tmp_path, monkeypatch), f"store={tmp_path / 'store'}", *PAPER_TINY]


def _finish(cfg, asks) -> None:
    """Mark every artifact of ``asks`` done (an empty artifact with this configuration's key): a finished grid."""
    r, store = runner(cfg, readonly=True), Store(cfg.run.store)
    for ask in asks:
        store.ensure(r.path(ask), r.record(ask), compute=lambda tmp: {"documents": 7})


def test_status_of_a_finished_paper_grid_is_complete_without_indexes_of_the_bundled_runs_corpora(paper, capsys):
    cfg = compose(paper)
    r = runner(cfg, readonly=True)
    rows = grid_asks(cfg, r)
    assert [a.params["name"] for a in rows["index"]] == ["train", "robust04"]
    assert [a.params["corpus"] for a in rows["firststage"]] == ["robust04", "core17", "core18"]
    _finish(cfg, [a for asks in rows.values() for a in asks])
    status = grid_status(cfg)
    assert complete(status) and status["index"].total == status["index"].done == 2
    assert main(["status", *paper]) == 0
    assert "missing" not in capsys.readouterr().out.split("\n", 1)[1].lower()
    # with leakexp's own BM25 for every corpus, each corpus needs its index
    own = compose([*paper, "rerank.first_stage=null"])
    assert [a.params["name"] for a in grid_asks(own)["index"]] == ["train", "robust04", "core17", "core18"]


def test_index_builds_only_the_indexes_the_grid_reads(paper, capsys):
    cfg = compose(paper)
    _finish(cfg, grid_asks(cfg)["index"])  # the two it needs are there; core17 / core18 would need their data
    assert main(["index", *paper]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["train", "robust04", "core17", "core18"]
    assert out[2] == "core17: no index needed (its first stage is the run core17.bm25-anserini.top100.run.gz)"
    assert not Store(cfg.run.store).path("index", "core17").exists()


# the paper's Hugging Face models, pinned to a commit of their repository (conf/experiment/paper.yaml)
PAPER_MODELS = ("sentence-transformers/paraphrase-MiniLM-L6-v2@c9a2bfebc254878aee8c3aca9e6844d5bbb102d1",
                "t5-base@a9723ea7f1b39c1eae772870f3b547bf6ef7e6c1",
                "bert-base-uncased@86b5e0934494bd15c9632b12f734a8a67f723594")


def missing(setting: str, name: str) -> str:
    """How the one line about a pinned model missing from the cache (downloads forbidden) begins."""
    repo, _, commit = name.partition("@")
    return f"{setting}={name}: the Hugging Face model {repo} at revision {commit} is not in the local cache"


def test_the_papers_models_are_pinned_and_the_toolkit_defaults_to_the_same_sbert(tmp_path):
    from leakexp.toolkit.audit import PAPER_DEFAULTS

    cfg = compose(["experiment=paper", f"store={tmp_path / 's'}"])
    assert (str(cfg.detect.sbert), cfg.model_of("monot5").checkpoint,
            cfg.model_of("monobert").checkpoint) == PAPER_MODELS
    assert PAPER_DEFAULTS["sbert"] == PAPER_MODELS[0]


def test_computing_commands_find_the_papers_models_in_the_cache_before_any_work(paper, tmp_path, monkeypatch):
    from test_hub import fake_cache

    from leakexp.runner.stage import ConfigError

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = compose([*paper, "grid.models=[monot5,monobert,knrm]"])
    store = Store(cfg.run.store, create=False).root
    for setting, name in zip(("detect.sbert", "model_overrides.monot5.checkpoint",
                              "model_overrides.monobert.checkpoint"), PAPER_MODELS):
        with pytest.raises(ConfigError) as err:
            runner(cfg)
        assert str(err.value).startswith(missing(setting, name))
        assert "\n" not in str(err.value) and not store.exists()
        runner(cfg, readonly=True)  # status and plan do not refuse
        fake_cache(cache, name)
    runner(cfg)
    # a command's own needs: indexes need no model, candidates only the SBERT model
    bare = tmp_path / "bare"
    bare.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(bare))
    fake_cache(bare, PAPER_MODELS[0])
    runner(cfg, needs=("embed",))
    runner(cfg, needs=())
    with pytest.raises(ConfigError, match=f"^model_overrides.monot5.checkpoint={PAPER_MODELS[1]}: "):
        runner(cfg, needs=("embed", "verify", "train"))
    # the command line's checkpoint is named as the command line's; a name without a commit is refused
    with pytest.raises(ConfigError, match="^model.checkpoint=castorini/monot5-base-msmarco: the Hugging Face model "
                                          "castorini/monot5-base-msmarco is named without a revision; pin "):
        runner(compose([*paper, "model=monot5", "model.checkpoint=castorini/monot5-base-msmarco",
                        "grid.models=[monot5]"]), needs=("train",))


def test_status_names_every_missing_model_of_the_grid_and_the_refusal_all_of_them(paper, tmp_path, monkeypatch):
    """A user on a disconnected machine copies the Hugging Face cache over once: what a run will still need names
    each missing checkpoint of the grid (monoT5's and monoBERT's, not only the first), and the one line of a
    computing command's refusal names them all."""
    from leakexp.runner.stage import ConfigError
    from leakexp.runner.registry import unmet_requirements

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = compose([*paper, "grid.models=[monot5,monobert,knrm]"])
    unmet = unmet_requirements(cfg)
    for setting, name in zip(("detect.sbert", "model_overrides.monot5.checkpoint",
                              "model_overrides.monobert.checkpoint"), PAPER_MODELS):
        assert [line.startswith(missing(setting, name)) for line in unmet].count(True) == 1, setting
    with pytest.raises(ConfigError) as err:
        runner(cfg, needs=("train",))
    message = str(err.value)
    assert message.startswith(missing("model_overrides.monot5.checkpoint", PAPER_MODELS[1]))
    assert f"; {missing('model_overrides.monobert.checkpoint', PAPER_MODELS[2])}" in message
    assert "\n" not in message


def test_real_data_without_annotations_refuses_to_compute_and_status_says_it_once(irds_corpora, tmp_path, monkeypatch,
                                                                                 capsys):
    """experiment=paper's verify.annotations is null (a ??? would not replace the toy world's `truth`): commands
    that verify stop with one line naming the setting and the study's four files; status counts what it can."""
    from test_hub import fake_cache

    from leakexp.runner.stage import ConfigError
    from leakexp.toolkit.annotations import FINAL_NAMES

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    fake_cache(cache, *PAPER_MODELS)
    overrides = [paper_env(tmp_path, monkeypatch)[0], f"store={tmp_path / 'store'}"]  # no annotation files
    cfg = compose(overrides)
    assert cfg.verify.annotations is None
    with pytest.raises(ConfigError) as err:
        runner(cfg)
    message = str(err.value)
    assert message.startswith("verify.annotations is not set: ") and "\n" not in message
    assert "webis-de/SPIRE-22 src/main/resources/manual-annotations/" in message
    assert "downloads them into fetch.dir, where a null verify.annotations finds them" in message
    assert all(name in message for name in FINAL_NAMES)
    assert main(["grid", *overrides]) == 2  # refused with the one report of what the grid lacks, before any work
    err = capsys.readouterr().err
    assert err.startswith("leakexp: 4 input(s) missing for the configured grid:\n"), err
    assert all(f"SPIRE-22 annotations {name} (verify.annotations)" in err for name in FINAL_NAMES)
    assert not (tmp_path / "store").exists()
    runner(cfg, needs=("embed",))  # detection and `annotations review` come before the annotations
    with pytest.raises(ConfigError, match="^verify.annotations=truth .* needs data.kind=toy, not irds: the real "
                                          "data's candidates are verified by the study's manual annotations"):
        runner(compose([*overrides, "verify.annotations=truth"]))
    # status: the artifacts it can key, the others counted once each, and one line that says why
    assert main(["status", *overrides]) == 1
    out, needs = capsys.readouterr().out.split("a run will still need")
    out = out.splitlines()
    assert len(out) < 20 and "(verify.annotations)" in needs  # then the list of what a run needs
    rows = {line.split()[0]: [int(x) for x in line.split()[1:]] for line in out[1:12]}
    missing = STATES.index("missing")  # the data is there (the miniature corpora): what lacks is the annotations
    assert rows["build"][-1] == rows["build"][missing] == 56 and rows["index"][-1] == 2  # 3 corpora x 2 types x 8 + 8
    assert rows["train"][-1] == 1400  # the No-Leakage models are one for every corpus
    why = [line for line in out if "verify.annotations" in line]
    assert len(why) == 1 and why[0].startswith("MISSING 1 verify, 56 build, 280 tokens, 1400 train, 1800 rerank, ")
    assert why[0].endswith(message)


def test_plan_and_status_of_the_paper_run_without_any_input_and_list_what_a_run_needs(tmp_path, monkeypatch, capsys):
    """The README's first command for the real grid works before the data is in place: no variants, annotations,
    GloVe or hub models. plan and status read nothing, so they list what a run will need (each with its setting);
    the commands that compute refuse."""
    for corpus in ("ROBUST04", "CORE17", "CORE18"):
        monkeypatch.delenv(f"LEAKEXP_VARIANTS_{corpus}", raising=False)
    monkeypatch.delenv("LEAKEXP_GLOVE", raising=False)
    monkeypatch.chdir(tmp_path)
    store = f"store={tmp_path / 'store'}"
    assert main(["plan", "experiment=paper", store]) == 0
    out = capsys.readouterr().out
    assert "job list: 1800 cells" in out
    needs = out.split("a run will still need (")[1]
    for setting in ("corpus robust04 has no query variants", "(verify.annotations)",
                    "word vectors glove.6B.300d.txt (embeddings of knrm, duet, pacrr)", "(detect.sbert)"):
        assert setting in needs, setting
    assert main(["status", "experiment=paper", store]) == 1  # nothing done yet, and it says why
    assert "corpus robust04 has no query variants" in capsys.readouterr().out
    assert main(["detect", "experiment=paper", store]) == 2  # computing refuses, before any work
    assert not (tmp_path / "store" / "detect").exists()
