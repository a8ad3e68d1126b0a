"""The robustness stages through the runner on a small toy grid: artifacts, exactness, cache reuse, tables."""

import re

import pandas as pd
import pytest

from leakexp.lib import robustness_stats
from leakexp.grid import work
from leakexp.stages.robustness import family as rb
from leakexp.tables import robustness as rt
from leakexp.runner import registry as stages
from leakexp.runner.registry import compose
from leakexp.lib.measures import per_query
from leakexp.lib.bm25 import bm25_search
from leakexp.runner.stage import Ask

GRID = ["data.queries_per_source=600", "grid.corpora=[toy_core17,toy_core18]", "grid.leakages=[none,msm]",
        "grid.sizes=[64]", "grid.models=[knrm]", "grid.seeds=[1]", "robustness.corpora=[toy_core17]",
        "robustness.sizes=null", "robustness.first_stage=bm25",
        "robustness.query_attacks=[char-any-1,word-synonym]", "robustness.doc_manipulations=[stuff,noise]"]


def _new(store, before: list[str]) -> list[str]:
    return store.computed()[len(before):]


@pytest.mark.slow
def test_robustness_stage_on_a_small_grid(tmp_path):
    cfg = compose([f"store={tmp_path}", *GRID])
    p = stages.runner(cfg)
    s = cfg
    cells = rb.robustness_cells(s)
    assert [str(c) for c in cells] == ["toy_core17/none/64/knrm/seed-1", "toy_core17/msm/64/knrm/seed-1"]
    assert all(p.state(a)[0] == "missing" for a in rb.parts(s, cells[0]).values())  # nothing trained yet
    assert rt.write_robustness_tables(cfg, p, tmp_path / "out", cells) == []
    for cell in cells:
        assert work.robust(p, cell) == {n: p.path(a) for n, a in rb.parts(s, cell).items()}
    asks = rb.parts(s, cells[0])
    parts = {n: p.path(a) for n, a in asks.items()}
    assert set(parts) == {"own", "ood-toy_core18", "char-any-1", "word-synonym", "doc-stuff", "doc-noise"}
    assert all(p.store.valid_marker(path) for path in parts.values())
    assert work.robustness_state(p, cells[1]) == "done"

    qrels = p.get(Ask.of("collection", corpus="toy_core17")).qrels
    run = pd.read_parquet(p.path(cells[0].ask("rerank")) / "run.parquet")
    for attack in ("char-any-1", "word-synonym"):
        shared = p.path(rb.queries_ask(s, "toy_core17", attack))
        att = pd.read_csv(shared / "attacks.tsv", sep="\t", dtype=str, keep_default_na=False)
        assert len(att) == 12 and (att.original != att.attacked).eq(att.applied == "True").all()
        assert (att.applied == "True").all() if attack == "word-synonym" else (att.applied == "True").sum() >= 6
        pq = pd.read_parquet(parts[attack] / "perquery.parquet").set_index("qid")
        new = pd.read_parquet(parts[attack] / "run.parquet")
        assert set(new.qid) <= set(pq.index[pq.applied])  # only attacked topics were scored
        untouched = pq[~pq.applied]
        assert (untouched.original == untouched.attacked).all()
        # the first stage is BM25 re-run with the attacked query, and the values are those of the stored runs
        one = att[att.applied == "True"].iloc[0]
        bm25 = bm25_search(p.get(Ask.of("index", name="toy_core17")),
                           pd.DataFrame({"qid": [one.qid], "query": [one.attacked]}), depth=int(cfg.rerank.depth))
        assert set(new[new.qid == one.qid].docno) == set(bm25.docno)
        again = per_query(new, qrels, ["nDCG@10"]).set_index("qid").value
        assert pq.attacked[pq.applied].to_dict() == pytest.approx(again[pq.index[pq.applied]].to_dict())
        orig = per_query(run, qrels, ["nDCG@10"]).set_index("qid").value
        assert pq.original.to_dict() == pytest.approx(orig.to_dict())
    stuffed = pd.read_parquet(parts["doc-stuff"] / "perquery.parquet")
    relevant = set(zip(qrels.qid[qrels.label >= 1].astype(str), qrels.docno[qrels.label >= 1].astype(str)))
    assert stuffed.relevant.tolist() == [(str(q), d) in relevant for q, d in zip(stuffed.qid, stuffed.docno)]
    assert (stuffed.gain == stuffed.rank_before - stuffed.rank_after).all()
    assert stuffed.before_is_stored.all()  # re-scoring the original document alone reproduces the stored run
    assert set(stuffed.TC) <= {0, 1} and stuffed.KT.between(0, 1).all()
    assert ((stuffed.rank_after != stuffed.rank_before) == (stuffed.KT > 0)).all()
    noisy = pd.read_parquet(parts["doc-noise"] / "perquery.parquet")
    assert len(noisy) == 12 and noisy.manipulated.gt(0).all() and noisy.before_is_stored.all()
    # OOD topics are marked shared when toy_core17 has them too (same id and title)
    ood_pq = pd.read_parquet(parts["ood-toy_core18"] / "perquery.parquet")
    field = cfg.rerank.query_field
    shared = robustness_stats.shared_topics(p.get(Ask.of("collection", corpus="toy_core17")).topics_frame(field),
                              p.get(Ask.of("collection", corpus="toy_core18")).topics_frame(field))
    assert set(ood_pq.qid[ood_pq.shared].astype(str)) == shared
    assert {"nDCG@10", "AP", "P@10"} == set(ood_pq.measure)
    ood = pd.read_parquet(p.path(p.inputs(asks["ood-toy_core18"])["run"]) / "run.parquet")  # the re-ranking it read
    first = p.get(Ask.of("firststage", corpus="toy_core18"))
    assert set(zip(ood.qid, ood.docno)) == set(zip(first.qid, first.docno))

    # cached: a second run computes nothing; a new attack computes only that attack
    before = p.store.computed()
    for cell in cells:
        work.robust(p, cell)
    assert _new(p.store, before) == []
    more = compose([f"store={tmp_path}", *GRID, "robustness.query_attacks=[char-any-1,word-synonym,word-delete]"])
    p2 = stages.runner(more)
    for cell in cells:
        work.robust(p2, cell)
    made = _new(p.store, before)
    assert len(made) == 3 and all("/word-delete/" in m for m in made), made
    assert sum(m.startswith("robustness/attacked-queries/toy_core17/word-delete/") for m in made) == 1
    # re-ranking the original pool is another configuration of the query attacks only
    before = p.store.computed()
    pool_cfg = compose([f"store={tmp_path}", *GRID, "robustness.first_stage=pool"])
    p_pool = stages.runner(pool_cfg)
    work.robust(p_pool, cells[0])
    made = _new(p.store, before)
    # each attack: its shared attacked queries (robustness/attacked-queries/<corpus>/<attack>/pool/) and the cell's part
    assert len(made) == 4 and sorted(a for m in made for a in ("char-any-1", "word-synonym") if f"/{a}/" in m) == [
        "char-any-1", "char-any-1", "word-synonym", "word-synonym"], made
    pool_part = p_pool.path(rb.parts(pool_cfg, cells[0])["char-any-1"])
    scored = pd.read_parquet(pool_part / "run.parquet")
    assert set(zip(scored.qid, scored.docno)) <= set(zip(run.qid, run.docno))

    files = rt.write_robustness_tables(cfg, p, tmp_path / "out", cells)
    names = {f.name for f in files}
    assert {"robustness_toy_core17.md", "robustness_toy_core17.tex", "robustness_toy_core17.csv",
            "robustness_dr_query.png", "robustness_perquery.csv", "robustness_queries_toy_core17.tsv",
            "robustness_documents_toy_core17.tsv"} <= names
    md = (tmp_path / "out" / "robustness_toy_core17.md").read_text()
    assert "first stage: BM25 re-run with the attacked query" in md and re.search(r"\| KNRM +\| MSM +\|", md)
    assert "Does leakage make a model more brittle?" in md
    long = pd.read_csv(tmp_path / "out" / "robustness_toy_core17.csv")
    assert {"nDCG@10", "VNAP", "%no", "gMAP", "worst 10% (leakexp)", "worst 25% (leakexp)", "OOD toy_core18",
            "DR_OOD toy_core18", "DR char-any-1", "DR word-synonym", "gain stuff", "median gain stuff", "top-10 stuff",
            "TC stuff", "KT stuff", "TC noise", "KT noise"} <= set(long.column)
    assert set(long.column) - {"gain stuff (relevant)"} <= set(rt.column_order(rb.robustness_settings(s), ["toy_core18"]))
    dr = long[(long.leakage == "msm") & (long.column == "DR word-synonym") & (long.subset == "all")].iloc[0]
    pq = pd.read_parquet(p.path(rb.parts(s, cells[1])["word-synonym"]) / "perquery.parquet")
    assert dr["mean"] == pytest.approx(robustness_stats.drop_rate(pq.attacked.mean(), pq.original.mean()))
    pool_md = rt.write_robustness_tables(pool_cfg, p_pool, tmp_path / "pool", cells)
    assert "INCOMPLETE" in (tmp_path / "pool" / "robustness_toy_core17.md").read_text()  # msm cell not in pool mode
    assert any(f.name == "robustness_toy_core17.md" for f in pool_md)
