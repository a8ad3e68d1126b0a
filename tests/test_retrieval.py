import pandas as pd

from leakexp.retrieval import bm25_run, build_index, clean_query
from leakexp.store import Store

DOCS = [("d1", "lyme disease ticks lyme"), ("d2", "hubble telescope images"), ("d3", "lyme regis beach"),
        ("d4", "ticks on deer")]


def test_bm25_ranks_and_caches(tmp_path):
    store = Store(tmp_path)
    idx = build_index(store, "tiny", iter(DOCS), fingerprint="v1")
    q = pd.DataFrame({"qid": ["1", "2"], "query": ["lyme disease?", "telescope"]})
    run = bm25_run(store, idx, "tiny/title", q, depth=2)
    assert run.columns.tolist() == ["qid", "query", "docno", "score", "rank"]
    assert run[run.qid == "1"].docno.tolist() == ["d1", "d3"]  # both match 'lyme'; d1 also 'disease'
    assert run[run.qid == "1"]["rank"].tolist() == [0, 1]
    assert run[run.qid == "2"].docno.tolist() == ["d2"]
    assert run.loc[0, "query"] == "lyme disease?"  # the original text is kept
    before = store.marker(store.path("bm25", "tiny/title")).finished_at
    bm25_run(store, idx, "tiny/title", q, depth=2)
    assert store.marker(store.path("bm25", "tiny/title")).finished_at == before


def test_clean_query_drops_punctuation():
    assert clean_query("what's (lyme) disease?") == "what s lyme disease"
