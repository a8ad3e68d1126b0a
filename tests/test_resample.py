"""leakexp.toolkit.resample on hand-made data with known answers: decontamination, ReSTrain, ReSTTest."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from leakexp.toolkit import resample as R
from leakexp.toolkit.queries import TEXT_COLUMNS, QuerySide
from leakexp.data.files import read_qrels, read_queries
from leakexp.data.sources import load_local_train_pool


class FakeEmbedder:
    def __init__(self, vectors: dict[str, np.ndarray]):
        self.vectors = vectors

    def __call__(self, texts, name):
        x = np.array([self.vectors[t] for t in texts], dtype=np.float32).reshape(len(texts), -1)
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def vec(dim: int, **axes: float) -> np.ndarray:
    """Unit vector with cosine a0 to axis 0, a1 to axis 1, ...; the remainder on the last axis."""
    v = np.zeros(dim)
    for k, value in axes.items():
        v[int(k[1:])] = value
    v[-1] = math.sqrt(max(0.0, 1 - float(np.sum(v[:-1] ** 2))))
    return v


def side(rows: list[tuple[str, str, str]], qrels: list[tuple[str, str, str, int]] = ()) -> QuerySide:
    """A side from (source, qid, text) rows and (source, qid, docno, label) qrels."""
    return QuerySide(pd.DataFrame([(s, q, "title", -1, t) for s, q, t in rows], columns=TEXT_COLUMNS),
                     pd.DataFrame(list(qrels), columns=["source", "qid", "docno", "label"]),
                     list(dict.fromkeys(r[0] for r in rows)))


# -- decontamination ---------------------------------------------------------------------------------------
DIM = 8
TEST_TEXTS = {"oil spills": vec(DIM, a0=1.0), "bee decline": vec(DIM, a1=1.0), "why bees vanish": vec(DIM, a2=1.0)}
TRAIN_TEXTS = {
    "oil spill": vec(DIM, a0=0.95),          # msmarco m1: above 0.91 for 'oil spills'
    "where bees go": vec(DIM, a2=0.92),      # msmarco m2: above for the description of t2
    "oil tanker": vec(DIM, a0=0.90),         # msmarco m3: just below
    "jazz music": vec(DIM, a3=0.5),          # msmarco m4
    "bees declining": vec(DIM, a1=0.97),     # orcas o1
    "football": vec(DIM, a4=0.3),            # orcas o2
    "oil spill cleanup": vec(DIM, a0=0.99),  # orcas m3: the same qid as msmarco's kept m3
}


def decon_sides():
    train = QuerySide(
        pd.DataFrame([("msmarco", "m1", "title", -1, "oil spill"), ("msmarco", "m2", "title", -1, "where bees go"),
                      ("msmarco", "m3", "title", -1, "oil tanker"), ("msmarco", "m4", "title", -1, "jazz music"),
                      ("orcas", "o1", "title", -1, "bees declining"), ("orcas", "o2", "title", -1, "football"),
                      ("orcas", "m3", "title", -1, "oil spill cleanup")], columns=TEXT_COLUMNS),
        pd.DataFrame([("msmarco", "m1", "D1", 1), ("msmarco", "m2", "D2", 1), ("msmarco", "m3", "D3", 1),
                      ("msmarco", "m4", "D9", 1), ("orcas", "o1", "D4", 1), ("orcas", "o2", "D5", 1),
                      ("orcas", "m3", "D6", 1)], columns=["source", "qid", "docno", "label"]),
        ["msmarco", "orcas"])
    test = QuerySide(
        pd.DataFrame([("dev", "t1", "title", -1, "oil spills"), ("dev", "t2", "title", -1, "bee decline"),
                      ("dev", "t2", "description", -1, "why bees vanish")], columns=TEXT_COLUMNS),
        pd.DataFrame([("dev", "t1", "X1", 2), ("dev", "t2", "D9", 1)], columns=["source", "qid", "docno", "label"]),
        ["dev"])
    return train, test


@pytest.fixture(autouse=True)
def _study_model_in_the_cache(tmp_path_factory, monkeypatch):
    """A hub cache holding the seeds' SBERT model (config and weights as the loaders find them): these tests check
    the commands past their model check, with an embedder stand-in where they embed."""
    from test_hub import fake_cache

    from leakexp.toolkit.audit import PAPER_DEFAULTS

    cache = tmp_path_factory.mktemp("hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(fake_cache(cache, str(PAPER_DEFAULTS["sbert"]))))


def test_decontaminate_removes_exactly_the_queries_above_the_threshold(tmp_path):
    train, test = decon_sides()
    emb = FakeEmbedder({**TEST_TEXTS, **TRAIN_TEXTS})
    f = R.decontaminate(train, test, emb, tmp_path / "d", threshold=0.91, k=2)
    removed = pd.read_csv(tmp_path / "d" / "removed.csv", dtype=str, keep_default_na=False)
    assert removed[["source", "qid", "reason", "test_qid", "test_field"]].values.tolist() == [
        ["msmarco", "m1", "similarity", "t1", "title"], ["msmarco", "m2", "similarity", "t2", "description"],
        ["orcas", "o1", "similarity", "t2", "title"], ["orcas", "m3", "similarity", "t1", "title"]]
    assert removed.similarity.astype(float).round(4).tolist() == [0.95, 0.92, 0.97, 0.99]
    assert f["removed"] == 4 and f["train_queries"] == 7 and f["test_queries_matched"] == 2
    assert read_queries(tmp_path / "d" / "msmarco.queries.tsv").values.tolist() == [["m3", "oil tanker"], ["m4", "jazz music"]]
    assert read_queries(tmp_path / "d" / "orcas.queries.tsv").values.tolist() == [["o2", "football"]]
    assert read_qrels(tmp_path / "d" / "orcas.qrels.txt").values.tolist() == [["o2", "D5", 1]]
    assert read_qrels(tmp_path / "d" / "qrels.txt").docno.tolist() == ["D3", "D9", "D5"]  # orcas' m3 (D6) is gone
    # loads back as the project's local training pool
    (tmp_path / "docs.jsonl").write_text("".join(f'{{"docno": "D{i}", "text": "doc {i}"}}\n' for i in range(1, 10)))
    pool = load_local_train_pool(msmarco=tmp_path / "d" / "msmarco.queries.tsv", orcas=tmp_path / "d" / "orcas.queries.tsv",
                                 msmarco_qrels=tmp_path / "d" / "msmarco.qrels.txt",
                                 orcas_qrels=tmp_path / "d" / "orcas.qrels.txt", docs=tmp_path / "docs.jsonl")
    assert len(pool.queries) == 3 and sorted(pool.qrels.docno) == ["D3", "D5", "D9"]
    data_yaml = (tmp_path / "d" / "data.yaml").read_text()
    assert "msmarco:" in data_yaml and "orcas_qrels:" in data_yaml


def test_decontaminate_by_label_and_determinism(tmp_path):
    train, test = decon_sides()
    emb = FakeEmbedder({**TEST_TEXTS, **TRAIN_TEXTS})
    for out in ("a", "b"):
        R.decontaminate(train, test, emb, tmp_path / out, threshold=0.91, k=2, by_label=True)
    removed = pd.read_csv(tmp_path / "a" / "removed.csv", dtype=str, keep_default_na=False)
    m4 = removed[removed.qid == "m4"].iloc[0]  # shares D9 with t2
    assert (m4.reason, m4.test_qid, m4.docno, m4.similarity) == ("label", "t2", "D9", "")
    assert len(removed) == 5
    for name in ("removed.csv", "msmarco.queries.tsv", "orcas.queries.tsv", "qrels.txt", "decontaminate.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_decontaminate_removes_exact_duplicates_whatever_the_embedding_says(tmp_path):
    # 'Oil  SPILLS!' is 'oil spills' after NFKC, case folding and punctuation: a leak even at similarity 0.5
    train = side([("msmarco", "e1", "Oil  SPILLS!"), ("msmarco", "k1", "jazz music")], [("msmarco", "e1", "D1", 1),
                                                                                      ("msmarco", "k1", "D2", 1)])
    test = side([("dev", "t1", "oil spills")])
    emb = FakeEmbedder({"Oil  SPILLS!": vec(DIM, a0=0.5), "jazz music": vec(DIM, a3=1.0),
                        "oil spills": vec(DIM, a0=1.0)})
    f = R.decontaminate(train, test, emb, tmp_path / "d", threshold=0.91, k=2)
    removed = pd.read_csv(tmp_path / "d" / "removed.csv", dtype=str, keep_default_na=False)
    assert removed[["qid", "reason", "test_qid"]].values.tolist() == [["e1", "exact", "t1"]]
    assert float(removed.similarity.iloc[0]) == pytest.approx(0.5)  # the actual similarity, below the threshold
    assert (f["removed"], f["removed_similarity"], f["removed_exact_only"]) == (1, 0, 1)
    assert f["test_queries_matched"] == 1 and f["matches_per_test_query"] == {"1": 1}
    assert read_queries(tmp_path / "d" / "msmarco.queries.tsv").qid.tolist() == ["k1"]


def test_decontaminate_counts_every_test_query_with_a_match(tmp_path):
    # x is above 0.91 for both test queries, but its best match is a: b was not counted before
    train = side([("tr", "x", "x"), ("tr", "y", "y"), ("tr", "z", "z")],
                 [("tr", q, f"D{q}", 1) for q in "xyz"])
    test = side([("dev", "a", "a"), ("dev", "b", "b")])
    emb = FakeEmbedder({"a": vec(DIM, a0=1.0), "b": vec(DIM, a0=0.96), "x": vec(DIM, a0=1.0),
                        "y": vec(DIM, a0=0.99), "z": vec(DIM, a5=1.0)})
    f = R.decontaminate(train, test, emb, tmp_path / "d", threshold=0.91, k=3)
    assert f["removed"] == 2 and f["test_queries_matched"] == 2
    # a: x (1.0) and y (0.99); b: x (0.96) and y (0.99, by the remainder on the last axis)
    assert f["matches_per_test_query"] == {"2": 2}
    m = pd.read_csv(tmp_path / "d" / "matches.csv", dtype={"qid": str})
    assert m[["qid", "matches"]].values.tolist() == [["a", 2], ["b", 2]]
    # k=1 keeps only each text's top neighbour in the first search: the count stays exact
    g = R.decontaminate(train, test, emb, tmp_path / "e", threshold=0.91, k=1)
    assert g["matches_per_test_query"] == {"2": 2} and g["test_queries_matched"] == 2


# -- ReSTrain -------------------------------------------------------------------------------------------------
RT_TEST = {"t1": vec(6, a0=1.0), "t2": vec(6, a1=1.0)}
RT_TRAIN = {  # (cos to t1, cos to t2)
    "r1": (0.95, 0.0), "r2": (0.80, 0.0), "r3": (0.70, 0.0), "r4": (0.0, 0.93), "r5": (0.0, 0.60),
    "r6": (0.65, 0.65), "r7": (0.1, 0.1), "r8": (0.2, 0.0), "r9": (0.0, 0.2), "r10": (0.05, 0.05),
    "r11": (0.99, 0.0),  # the most similar of all, but it has no relevant document: never drawn
}


def restrain_sides():
    vectors = {f"text {t}": v for t, v in RT_TEST.items()}
    vectors.update({f"text {q}": vec(6, a0=a, a1=b) for q, (a, b) in RT_TRAIN.items()})
    train = side([("train", q, f"text {q}") for q in RT_TRAIN],
                 [("train", q, f"P{q}", 1) for q in RT_TRAIN if q != "r11"] + [("train", "r11", "Pr11", 0)])
    test = side([("dl", t, f"text {t}") for t in RT_TEST], [("dl", t, f"X{t}", 1) for t in RT_TEST])
    return train, test, FakeEmbedder(vectors)


def qids(path) -> list[str]:
    return read_qrels(path).qid.tolist()


def test_restrain_sizes_nesting_balance_and_threshold(tmp_path):
    train, test, emb = restrain_sides()
    table = R.restrain(train, test, emb, tmp_path, sizes=[4, 2], threshold=0.5, k=1, seed=7)
    d = tmp_path / "restrain"
    inter = {s: qids(d / str(s) / "interpolate.train-qrel.txt") for s in (2, 4)}
    extra = {s: qids(d / str(s) / "extrapolate.train-qrel.txt") for s in (2, 4)}
    # rounds: t1 takes r1 (.95) and t2 r4 (.93); then t1 r2 (.80), t2 r6 (.65)
    assert inter == {2: ["r1", "r4"], 4: ["r1", "r2", "r4", "r6"]}
    assert set(extra[2]) <= set(extra[4]) and len(extra[2]) == 2 and len(extra[4]) == 4
    assert set(extra[4]) == {"r7", "r8", "r9", "r10"}  # every query not above 0.5 and not interpolation
    assert not set(extra[4]) & set(inter[4])
    sel = pd.read_csv(d / "selection.csv", dtype={"qid": str, "test_qid": str}, keep_default_na=False)
    i = sel[sel.kind == "interpolate"]
    assert i.qid.tolist() == ["r1", "r4", "r2", "r6"] and i.test_qid.tolist() == ["t1", "t2", "t1", "t2"]
    assert (sel[sel.kind == "extrapolate"].similarity <= 0.5).all()
    assert table[["kind", "size", "queries", "qrels"]].values.tolist() == [
        ["interpolate", 2, 2, 2], ["extrapolate", 2, 2, 2], ["interpolate", 4, 4, 4], ["extrapolate", 4, 4, 4]]
    assert table.set_index(["kind", "size"]).loc[("extrapolate", 4), "max similarity"] == pytest.approx(0.2)
    assert (d / "4" / "interpolate.train-qrel.txt").read_text() == "r1 0 Pr1 1\nr2 0 Pr2 1\nr4 0 Pr4 1\nr6 0 Pr6 1\n"
    again = tmp_path / "again"
    R.restrain(train, test, emb, again, sizes=[2, 4], threshold=0.5, k=1, seed=7)
    assert (again / "restrain" / "selection.csv").read_bytes() == (d / "selection.csv").read_bytes()


def test_restrain_refuses_sizes_it_cannot_fill_naming_the_largest_that_fits_and_writes_nothing(tmp_path):
    """Ten queries have a relevant document, four of them are not above 0.5 (r7-r10) and come last in the
    interpolation order: size 4 fits both sets, 5 does not, and the first refusal names 4, whatever was asked."""
    train, test, emb = restrain_sides()
    for size in (5, 11):
        with pytest.raises(ValueError, match=r"largest size %d cannot be filled twice over: the training side holds "
                                             r"10 training queries with a relevant document, 4 of them not above 0.5"
                                             r".*choose sizes <= 4 " % size):
            R.restrain(train, test, emb, tmp_path / "out", sizes=[2, size], threshold=0.5)
        assert not (tmp_path / "out").exists()
    R.restrain(train, test, emb, tmp_path / "out", sizes=[4], threshold=0.5)  # the largest named fits
    assert (tmp_path / "out" / "restrain" / "4" / "extrapolate.train-qrel.txt").exists()
    with pytest.raises(ValueError, match="positive"):
        R.restrain(train, test, emb, tmp_path, sizes=[0], threshold=0.5)


def test_interpolation_order_flags_lists_that_run_out():
    # two test queries, top-2 each; t2's two neighbours are t1's too, so t2 runs out in round 2
    sims = np.array([[0.9, 0.8], [0.85, 0.7]], dtype=np.float32)
    ids = np.array([[0, 1], [0, 1]])
    eligible = np.ones(10, dtype=bool)
    rows, sim, by, ran_out = R.interpolation_order(sims, ids, np.array([0, 1]), 2, eligible, size=4)
    assert ran_out and rows.tolist() == [0, 1]
    rows, _, by, ran_out = R.interpolation_order(sims, ids, np.array([0, 1]), 2, eligible[:2], size=2)
    assert not ran_out and rows.tolist() == [0, 1] and by.tolist() == [0, 1]


# -- ReSTTest -------------------------------------------------------------------------------------------------
def clustered(seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = np.eye(6)[:3]
    vectors, train_rows, test_rows = {}, [], []
    for c in range(3):
        for i in range(10):
            text = f"train c{c} {i}"
            vectors[text] = centres[c] + 0.1 * rng.standard_normal(6)
            train_rows.append(("train", f"c{c}-{i}", text))
        for i in range(2):
            text = f"test c{c} {i}"
            vectors[text] = centres[c] + 0.1 * rng.standard_normal(6)
            test_rows.append(("dev", f"d{c}-{i}", text))
    train = side(train_rows, [("train", q, f"P{q}", 1) for _, q, _ in train_rows])
    test = side(test_rows, [("dev", q, f"X{q}", 1) for _, q, _ in test_rows])
    return train, test, FakeEmbedder(vectors)


@pytest.mark.parametrize("buckets", [3, 5])
def test_resttest_every_test_query_in_exactly_one_extrapolation_bucket(tmp_path, buckets):
    train, test, emb = clustered()
    table = R.resttest(train, test, emb, tmp_path, buckets=buckets, seed=0)
    d = tmp_path / "resttest"
    all_test = set(test.queries.qid)
    extrapolated = []
    assignment = pd.read_csv(d / "buckets.csv", dtype=str)
    for b in range(1, buckets + 1):
        e = set(qids(d / f"bucket-{b}" / "extrapolate.dev-qrel.txt"))
        i = set(qids(d / f"bucket-{b}" / "interpolate.dev-qrel.txt"))
        assert not e & i and e | i == all_test
        extrapolated += sorted(e)
        in_b = set(assignment[(assignment.side == "train") & (assignment.bucket == str(b))].qid)
        assert set(qids(d / f"bucket-{b}" / "train-qrel.txt")) == set(train.queries.qid) - in_b
    assert sorted(extrapolated) == sorted(all_test)  # each test query once
    assert table["test extrapolate"].sum() == len(all_test)
    if buckets == 3:  # three well separated clusters are found
        for c in range(3):
            members = assignment[assignment.qid.str.startswith((f"c{c}-", f"d{c}-"))]
            assert members.bucket.nunique() == 1
        assert assignment.bucket.nunique() == 3


def test_resttest_is_deterministic(tmp_path):
    train, test, emb = clustered(seed=1)
    R.resttest(train, test, emb, tmp_path / "a", buckets=4, seed=3, sample=20)
    R.resttest(train, test, emb, tmp_path / "b", buckets=4, seed=3, sample=20)
    assert (tmp_path / "a" / "resttest" / "buckets.csv").read_bytes() == (tmp_path / "b" / "resttest" / "buckets.csv").read_bytes()


def test_kmeans_buckets_on_memmap_in_chunks(tmp_path):
    rng = np.random.default_rng(0)
    x = np.concatenate([np.eye(4)[c] + 0.05 * rng.standard_normal((50, 4)) for c in range(2)]).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    mm = np.memmap(tmp_path / "x.f32", dtype=np.float32, mode="w+", shape=x.shape)
    mm[:] = x
    (a,) = R.kmeans_buckets([mm], 2, seed=0, sample=30, chunk_size=7)
    assert a[:50].tolist() == [1] * 50 and a[50:].tolist() == [2] * 50
    with pytest.raises(ValueError, match="--buckets 5: only 3 queries"):
        R.kmeans_buckets([x[:3]], 5)


# -- the command line and the toy world ------------------------------------------------------------------------
def test_cli_resample_and_decontaminate_errors(tmp_path, capsys):
    from leakexp.cli.main import main

    (tmp_path / "train.tsv").write_text("a\tx\n")
    (tmp_path / "dev.tsv").write_text("b\ty\n")
    rc = main(["resample", "restrain", f"store={tmp_path / 's'}", "--train", str(tmp_path / "train.tsv"),
               "--test", str(tmp_path / "dev.tsv"), "--out", str(tmp_path / "o")])
    assert rc == 2 and "needs --sizes" in capsys.readouterr().err
    rc = main(["resample", "resttest", "--train", str(tmp_path / "train.tsv"), "--test", str(tmp_path / "dev.tsv"),
               "--out", str(tmp_path / "o"), f"store={tmp_path / 's'}"])
    assert rc == 2 and "the training side has no qrels" in capsys.readouterr().err
    rc = main(["decontaminate", "--train", str(tmp_path / "train.tsv"), "--out", str(tmp_path / "o")])
    assert rc == 2 and "--test" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow  # the bundled MiniLM over the small toy world: ~30 s on 2 cores
def test_demo_on_the_toy_world(small_cfg):
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner

    r = runner(small_cfg)
    path = r.ensure(Ask.of("pair-audit"))
    out = {k: path / v for k, v in r.store.marker(path).figures["outputs"].items()}
    figures = pd.read_json(out["audit"] / "audit.json", typ="series")
    assert figures["query_overlap"] > 0 and figures["test_queries"] == 54
    assert figures["label_overlap"] == 0  # the toy world's training and test documents are disjoint
    removed = pd.read_csv(out["decontaminate"] / "removed.csv")
    above = removed.similarity > small_cfg.detect.threshold
    assert len(removed) > 0 and (above | removed.reason.str.contains("exact")).all()
    assert (out["restrain"] / "summary.csv").exists() and (out["resttest"] / "bucket-5").is_dir()
