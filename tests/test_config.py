import pytest

from leakexp.runner.config import ConfigError
from leakexp.runner.registry import compose


def test_demo_is_the_default_and_paper_describes_the_study():
    demo = compose([])
    assert demo.data.kind == "toy" and demo.corpus.name == "toy_robust" and demo.model.name == "knrm"
    paper = compose(["experiment=paper", "verify.annotations=[a.jsonl]"])
    assert list(paper.grid.sizes) == [1000 * 2**i for i in range(8)]
    assert list(paper.grid.corpora) == ["robust04", "core17", "core18"]
    assert list(paper.grid.seeds) == [1, 2, 3, 4, 5] and len(paper.grid.models) == 5
    assert paper.corpus.fixed_leak_queries == 500
    assert compose(["experiment=paper", "corpus=core17"]).corpus.fixed_leak_queries == 100
    assert paper.detect.threshold == 0.91 and paper.bm25.k1 == 0.9 and paper.bm25.b == 0.4


def test_paper_sweep_matches_the_grid():
    from omegaconf import OmegaConf

    from leakexp.runner.config import conf_dir

    sweep = OmegaConf.load(conf_dir() / "experiment" / "paper.yaml").hydra.sweeper.params
    grid = OmegaConf.load(conf_dir() / "grid" / "paper.yaml")
    assert sweep.corpus.split(",") == list(grid.corpora)
    assert sweep.leakage.split(",") == list(grid.leakages)
    assert [int(s) for s in sweep.size.split(",")] == list(grid.sizes)
    assert sweep.model.split(",") == list(grid.models)
    assert [int(s) for s in sweep.seed.split(",")] == list(grid.seeds)


@pytest.mark.parametrize("override, key", [
    ("corpus=robust05", "corpus=robust05 is unknown"),
    ("model=bm42", "model=bm42 is unknown"),
    ("experiment=nope", "experiment=nope is unknown"),
    ("size=1001", "size=1001"),
    ("size=100", "size=100 is smaller than the 120 fixed leaked instances of corpus=toy_robust leakage=msm"),
    ("corpus=robust04", "corpus=robust04 is not one of data.corpora"),
    ("evaluate.mfr_missing=zero", "evaluate.mfr_missing: input should be 'skip', 'depth' or 'infinite'"),
    ("grid.models=[knrm,bm42]", "model=bm42 is unknown"),
    ("evaluate.mfr=arithmetic", "evaluate.mfr_missing=infinite makes an arithmetic MFR infinite"),
    ("evaluate.mfr=rank1", "evaluate.mfr: input should be 'reciprocal_of_mrr' or 'arithmetic'"),
])
def test_bad_values_name_the_key(override, key):
    from leakexp.runner import registry as stages

    extra = ["leakage=msm"] if override.startswith("size=100") else []
    with pytest.raises(ConfigError, match=key.replace("[", r"\[")):
        stages.compose([override, *extra])  # the stages' own sections (e.g. evaluate) are checked here


def test_a_stage_section_is_checked_when_the_configuration_is_composed(tmp_path):
    """``evaluate`` is the evaluation stage's section: composing judges it, as every section, before a runner exists
    and anything is written to the store."""
    with pytest.raises(ConfigError, match="evaluate.mfr_missing: input should be 'skip', 'depth' or 'infinite'"):
        compose([f"store={tmp_path / 'store'}", "evaluate.mfr_missing=zero"])
    assert not (tmp_path / "store").exists()


def test_paper_models_use_the_papers_weights_and_demo_the_embedded_ones():

    paper = compose(["experiment=paper"])
    assert paper.model_of("monot5").checkpoint == "t5-base@a9723ea7f1b39c1eae772870f3b547bf6ef7e6c1"
    assert paper.model_of("monobert").checkpoint == \
        "bert-base-uncased@86b5e0934494bd15c9632b12f734a8a67f723594"  # pinned to a commit: its keys name it
    assert paper.model_of("monobert").train.lr == 3e-6  # dl4marco-bert README
    assert paper.model_of("knrm").train.batch_size == 32  # Capreolus
    demo = compose([])
    assert demo.model_of("monot5").checkpoint == "embedded"
    assert demo.model_of("knrm").embeddings == "bundled"
    # the command line wins over the experiment's model_overrides for the selected model
    assert compose(["model.train.lr=0.5"]).model_of("knrm").train.lr == 0.5


def test_the_embedded_monot5_is_refused_for_real_data():
    from leakexp.runner import registry as stages

    with pytest.raises(ConfigError, match="models.monot5.checkpoint=embedded needs the toy world"):
        stages.compose(["experiment=paper", "verify.annotations=[a.jsonl]", "detect.fields=[title]",
                        "model=monot5", "model_overrides.monot5.checkpoint=embedded"])
    stages.compose(["experiment=paper", "verify.annotations=[a.jsonl]", "detect.fields=[title]", "model=monot5"])


def test_corpus_overrides_change_any_corpus_of_the_grid_and_the_keys_that_read_it(tmp_path):
    """``corpus.*`` changes the selected corpus only; ``corpus_overrides.<name>.*`` any corpus of the grid (e.g. the
    leak counts a smaller collection supports), and re-keys exactly that corpus's leaked training sets."""
    from leakexp.runner import registry as stages
    from leakexp.stages.cell import Cell
    from leakexp.runner.registry import runner

    base = [f"store={tmp_path}", "grid.sizes=[128]"]
    cfg = compose([*base, "corpus_overrides.toy_core17.fixed_leak_queries=3", "corpus.test_leak_queries=8"])
    corpora = cfg.values["corpora"]
    assert corpora["toy_core17"]["fixed_leak_queries"] == 3 and corpora["toy_core17"]["test_leak_queries"] == 24
    assert corpora["toy_robust"]["test_leak_queries"] == 8 and corpora["toy_core18"]["fixed_leak_queries"] == 24
    # the command line's corpus.* wins over corpus_overrides for the selected corpus
    both = compose([*base, "corpus_overrides.toy_robust.fixed_leak_queries=5", "corpus.fixed_leak_queries=7"])
    assert both.corpus_of("toy_robust").fixed_leak_queries == 7
    plain = runner(compose(base), readonly=True)
    changed = runner(cfg, readonly=True)
    key = lambda r, corpus, leakage: r.path(Cell(corpus, leakage, 128, "knrm", 1).ask("build")).name  # noqa: E731
    assert key(plain, "toy_core17", "msm") != key(changed, "toy_core17", "msm")
    assert key(plain, "toy_core18", "msm") == key(changed, "toy_core18", "msm")
    assert key(plain, "toy_core17", "test") == key(changed, "toy_core17", "test")
    with pytest.raises(ConfigError, match="corpus_overrides.toy_core19 names no corpus"):
        compose([*base, "corpus_overrides.toy_core19.fixed_leak_queries=3"])
    with pytest.raises(ConfigError, match="corpora.toy_core18.fixed_leak_queries"):
        stages.compose([*base, "corpus_overrides.toy_core18.fixed_leak_queries=-1"])


def test_the_documents_check_and_leak_counts_re_key_neither_collection_nor_pool(tmp_path):
    """Accepting a short corpus on purpose, or another leak count, re-keys its check (corpus-stats) or the training sets
    that read it, not the collection and pool that everything else (detection, every set and model) derives from."""
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner

    def keys(*extra):
        r = runner(compose([f"store={tmp_path}", *extra]), readonly=True)
        asks = {"detect": Ask.of("detect"), "fillers": Ask.of("fillers"),
                "stats-robust": Ask.of("corpus-stats", name="toy_robust"), "stats-train": Ask.of("corpus-stats", name="train")}
        return {k: r.key(a) for k, a in asks.items()}

    base = keys()
    for extra, changed in ((["corpus.accept_short_documents=true"], {"stats-robust"}),
                           (["data.accept_duplicate_docnos=true"], {"stats-train"}),
                           (["corpus.documents=web"], {"stats-robust"}),
                           (["corpus.fixed_leak_queries=50", "corpus_overrides.toy_core18.test_leak_queries=2"], set())):
        got = keys(*extra)
        assert {k for k in base if got[k] != base[k]} == changed, extra


def test_a_composed_config_is_the_callers_and_an_edited_config_file_composes_anew(tmp_path, monkeypatch):
    """Hydra's compositions are kept per content of conf/ (each takes about 0.2 s): a caller changing the config it got
    changes nobody else's, and an edit of any YAML file, same size and modification time included, is composed anew."""
    import os
    import shutil

    from leakexp.runner.config import compose_raw, conf_dir

    shutil.copytree(conf_dir(), tmp_path / "conf")
    monkeypatch.setenv("LEAKEXP_CONF", str(tmp_path / "conf"))
    first = compose_raw(["model=knrm"])
    first.seed = 99
    first.model.train.lr = 123.0
    again = compose_raw(["model=knrm"])
    assert again.seed == 1 and again.model.train.lr != 123.0 and again is not first
    path = tmp_path / "conf" / "config.yaml"
    stat = path.stat()
    text = path.read_text()
    edited = text.replace("seed: 1", "seed: 7", 1)
    assert edited != text and len(edited) == len(text)
    path.write_text(edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # a same-size edit within the clock's resolution
    assert compose_raw(["model=knrm"]).seed == 7
    monkeypatch.delenv("LEAKEXP_VARIANTS_ROBUST04", raising=False)
    assert compose_raw(["experiment=paper", "corpus=robust04"]).corpus.variants is None
    monkeypatch.setenv("LEAKEXP_VARIANTS_ROBUST04", "/data/variants.tsv")  # read when accessed, not when composed
    assert compose_raw(["experiment=paper", "corpus=robust04"]).corpus.variants == "/data/variants.tsv"


def test_hydra_composes_each_choice_of_config_groups_once(tmp_path, monkeypatch):
    import shutil

    import hydra

    from leakexp.runner.config import conf_dir

    shutil.copytree(conf_dir(), tmp_path / "conf")  # a conf/ of its own: no composition kept from other tests
    monkeypatch.setenv("LEAKEXP_CONF", str(tmp_path / "conf"))
    calls = []
    real = hydra.compose
    monkeypatch.setattr(hydra, "compose", lambda **kw: calls.append(kw["overrides"]) or real(**kw))
    for _ in range(3):
        compose(["model=duet"])
        compose(["model=duet", "seed=2", f"store={tmp_path / 'a'}"])
        compose([f"store={tmp_path / 'b'}", "model=knrm", "seed=2"])
    assert calls == [["model=duet"], ["model=knrm"]]  # each choice of config groups; values are set on a copy


COMPOSED_ALIKE = [
    [], ["experiment=paper"], ["seed=3", "model=duet"], ["model=duet", "seed=3"], ["model=monot5", "model.max_length=96"],
    ["store=/tmp/x", "grid.sizes=[128,256]"], ["++model_overrides.knrm.train.lr=0.5"], ["+colour=blue"],
    ["~robustness.query_attacks"], ["robustness.doc_manipulations=null"], ['report.figure_model="a b, c"'],
    ["experiment=paper", "corpus=core17", "verify.annotations=[a.jsonl,b.jsonl]"], ["store=${oc.env:HOME}/s"],
    ["grid.models=[knrm,duet]", "experiment=demo", "++corpus_overrides.toy_core17.fixed_leak_queries=10"],
    ["data.queries_per_source=600", "data=toy"], ["plan.gpu={monot5: 2.0}"],
    # refused: an unknown key, an addition of an existing key, a deletion of a missing one, a sweep, a bad value
    ["modle=knrm"], ["+seed=3"], ["~nothing.here"], ["seed=1,2"], ["seed=[1"],
]


@pytest.mark.parametrize("overrides", COMPOSED_ALIKE, ids=lambda o: " ".join(o) or "(none)")
def test_a_composition_equals_hydras_own_whole_composition(overrides):
    """compose keeps the config groups' composition per choice of groups and sets the values on a copy with Hydra's
    own function: the config (every value, interpolations unresolved, struct flag) and any refusal are Hydra's."""
    import copy

    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from leakexp.runner import config

    def outcome(fn):
        try:
            cfg = fn()
        except (HydraException, ValueError) as exc:
            return type(exc).__name__, str(exc)
        return OmegaConf.to_container(cfg, resolve=False), OmegaConf.is_struct(cfg)

    fast = outcome(lambda: config._compose(list(overrides)))
    whole = outcome(lambda: copy.deepcopy(config._composed(tuple(overrides), config._conf_version())))
    assert fast == whole
