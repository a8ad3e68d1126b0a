"""Benchmarks: each prints measured figures as `name: value` lines (nothing here is typed in).

    python benchmarks/run.py            # all sections
    python benchmarks/run.py detect     # one section: detect | build | rerank | train | monot5 | pipeline | gpu

The gpu section (CUDA only; it says so and skips without) also writes its figures to $LEAKEXP_STORE/bench/gpu.json
(default store/bench/gpu.json), which `leakexp plan` then uses instead of the config's assumed throughput.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def emit(name: str, value) -> None:
    print(f"{name}: {value:.4g}" if isinstance(value, float) else f"{name}: {value}", flush=True)


def bench_detect(root: Path) -> None:
    """The detection stage against a bare encode + IndexFlatIP search of the same data, in one run."""
    import faiss
    import numpy as np

    from leakexp.runner.registry import compose
    from leakexp.lib.dense import load_sbert
    from leakexp.lib.candidates import topic_fields
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner

    cfg = compose([f"store={root / 'detect'}", "data.queries_per_source=5000"])
    r = runner(cfg)
    detect = r.settings.detect
    pool = r.get(Ask.of("pool"))
    collections = [r.get(Ask.of("collection", corpus=c)) for c in r.settings.data.corpora]
    load_sbert(detect.sbert)  # warm the file cache for both timings
    texts = pool.queries.text.tolist()
    topics = topic_fields(collections, list(detect.fields)).text.tolist()

    start = time.perf_counter()
    model = load_sbert(detect.sbert)
    q = {s: model.encode(pool.queries[pool.queries.source == s].text.tolist(), batch_size=detect.batch_size,
                         normalize_embeddings=True, convert_to_numpy=True) for s in ("msmarco", "orcas")}
    t = model.encode(topics, batch_size=detect.batch_size, normalize_embeddings=True, convert_to_numpy=True)
    search_start = time.perf_counter()
    for emb in q.values():
        index = faiss.IndexFlatIP(emb.shape[1])
        index.add(np.ascontiguousarray(emb, dtype=np.float32))
        index.search(np.ascontiguousarray(t, dtype=np.float32), detect.k)
    bare_search = time.perf_counter() - search_start
    bare = time.perf_counter() - start

    start = time.perf_counter()
    cands = r.get(Ask.of("detect"))  # the embeddings of both sources, then the search (pool and topics loaded)
    stage = time.perf_counter() - start
    emit("detect_queries", len(texts))
    emit("detect_topic_fields", len(topics))
    emit("detect_embed_queries_per_s", len(texts) / (bare - bare_search))
    emit("detect_exact_search_top100_s", bare_search)
    emit("detect_stage_s", stage)
    emit("detect_bare_encode_search_s", bare)
    emit("detect_stage_over_bare_ratio", stage / bare)
    emit("detect_candidate_rows", len(cands))


def bench_build(root: Path) -> None:
    """All training sets of the demo grid from a fresh store, and the paper-scale estimate.

    A No-Leakage set is one for every corpus (its fillers exclude the leaks of all corpora), so the grid's
    corpus x leakage x size requests are fewer distinct sets; each is built and counted once."""
    import pandas as pd

    from leakexp.runner.registry import compose
    from leakexp.lib.bm25 import bm25_search
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner

    cfg = compose([f"store={root / 'build'}"])
    r = runner(cfg)
    index = r.ensure(Ask.of("index", name="train"))
    r.ensure(Ask.of("detect")), r.get(Ask.of("verify"))  # upstream stages are not the builder's cost
    sets = list(dict.fromkeys(r.normal(Ask.of("build", corpus=c, leakage=l, size=int(s)))
                              for c in r.settings.grid.corpora for l in r.settings.grid.leakages
                              for s in r.settings.grid.sizes))
    negatives = list(dict.fromkeys(a for s in sets for a in r.inputs(s)["negatives"]))
    start = time.perf_counter()
    for a in negatives:  # the fillers (an in-process value) with the first; each chunk once, shared by the sets
        r.ensure(a)
    neg_s = time.perf_counter() - start
    start = time.perf_counter()
    n_sets, instances = 0, 0
    for a in sets:
        r.ensure(a)
        n_sets, instances = n_sets + 1, instances + int(a.params["size"])
    sets_s = time.perf_counter() - start
    pool = r.get(Ask.of("pool")).queries  # an id may name an MS MARCO and an ORCAS query: one BM25 id each
    q = pd.DataFrame({"qid": pool.source + ":" + pool.qid.astype(str), "query": pool.text})
    start = time.perf_counter()
    bm25_search(index, q, depth=100, threads=2)
    qps = len(q) / (time.perf_counter() - start)
    emit("build_toy_sets", n_sets)
    emit("build_toy_negatives_s", neg_s)
    emit("build_toy_sets_s", sets_s)
    emit("build_toy_total_s", neg_s + sets_s)
    emit("build_bm25_queries_per_s", qps)
    # per size: 3 corpora x (msm, test) sets plus the one No-Leakage set that every corpus shares
    paper_instances = sum(1000 * 2**i for i in range(8)) * (3 * 2 + 1)
    emit("build_paper_instances", paper_instances)
    # BM25 for 64k filler queries + leaks on MS MARCO docs is slower per query than the toy index;
    # the estimate scales the measured toy rates linearly (a lower bound).
    emit("build_paper_estimate_s", 66000 / qps + sets_s / instances * paper_instances)
    bench_cpu_scale()


def synthetic_negatives_frames(n_queries: int, depth: int, seed: int = 0):
    """Training qrels (one relevant document per query, a tenth of the queries two), a BM25 run of ``depth``
    candidates per query (the relevant one among them; a twentieth of the queries without a run) and the queries
    walked, as the sets stage has them."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    qid = pd.Series(np.arange(n_queries).astype(str), dtype=str)
    source = pd.Series(np.where(np.arange(n_queries) % 2, "orcas", "msmarco"), dtype=str)
    docs = pd.Series("D" + pd.Series(np.arange(3_000_000)).astype(str), dtype=str).to_numpy()
    rel = rng.integers(0, len(docs), n_queries)
    two = np.flatnonzero(np.arange(n_queries) % 10 == 0)
    qrels = pd.DataFrame({"source": pd.concat([source, source.iloc[two]], ignore_index=True),
                          "qid": pd.concat([qid, qid.iloc[two]], ignore_index=True),
                          "docno": docs[np.concatenate([rel, rng.integers(0, len(docs), len(two))])]})
    has_run = np.flatnonzero(np.arange(n_queries) % 20 != 0)
    cands = rng.integers(0, len(docs), (len(has_run), depth))
    cands[:, rng.integers(0, depth)] = rel[has_run]
    run = pd.DataFrame({"source": np.repeat(source.to_numpy()[has_run], depth),
                        "qid": np.repeat(qid.to_numpy()[has_run], depth),
                        "docno": docs[cands.ravel()], "rank": np.tile(np.arange(depth), len(has_run))})
    walk = pd.DataFrame({"qid": qid, "text": "query " + qid, "source": source})
    return qrels, run, walk


def bench_negatives(n_queries: int, depth: int, negatives_cls=None, walk_fn=None) -> float:
    """Training queries per second (CPU time of this process) that pairing with negatives handles: the build
    stage's ``Negatives.from_frames`` over qrels and run, then walking every query for its pair."""
    from leakexp.lib import training_sets

    negatives_cls = negatives_cls or training_sets.Negatives
    walk_fn = walk_fn or training_sets._pairs_from_queries
    qrels, run, walk = synthetic_negatives_frames(n_queries, depth)
    start = time.process_time()
    neg = negatives_cls.from_frames(qrels, run, 0)
    pairs, skipped = walk_fn(walk, neg, len(walk), "filler")
    took = time.process_time() - start
    assert len(pairs) + skipped == len(walk) and skipped >= n_queries // 20
    return n_queries / took


def synthetic_documents(n_docs: int, words: int, seed: int = 0) -> list[str]:
    """Documents of ``words`` words drawn from a Zipf-like 200k-word vocabulary with capitals, possessives,
    numbers and punctuation (what the analyzer sees in web text)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    lengths = rng.integers(1, 12, 200_000)
    vocab = np.array(["".join(rng.choice(letters, size=k)) for k in lengths], dtype=object)
    vocab[::50] = [w.capitalize() for w in vocab[::50]]
    vocab[1::97] = [w + "'s" for w in vocab[1::97]]
    vocab[2::31] = [w + "," for w in vocab[2::31]]
    vocab[3::43] = [w + "." for w in vocab[3::43]]
    vocab[4::71] = [str(i) for i in range(len(vocab[4::71]))]
    p = 1 / np.arange(1, len(vocab) + 1) ** 1.05
    p /= p.sum()
    return [" ".join(vocab[rng.choice(len(vocab), size=words, p=p)]) for _ in range(n_docs)]


def bench_df(texts: list[str], count=None) -> tuple[float, float]:
    """(words/s, documents/s) of one df count over ``texts`` in this process (CPU time; one core)."""
    from leakexp.models.capreolus import IdfTable

    count = count or IdfTable.from_docs
    words = sum(len(t.split()) for t in texts)
    start = time.process_time()
    count(texts)
    took = time.process_time() - start
    return words / took, len(texts) / took


def bench_cpu_scale() -> None:
    """The CPU work that grows with the real data: pairing training queries with negatives (1M synthetic queries
    with 10 BM25 candidates each; and 100k at the real depth 100) and counting the df table (10k synthetic
    documents of 1,100 words, MS MARCO documents' length; one core: the df stage spreads chunks over
    ``bm25.threads`` processes). ``leakexp plan`` counts their hours with these rates (plan.negatives_queries_per_s,
    plan.df_words_per_s). CPU time of this process, so other load on the machine matters less."""
    emit("negatives_queries_per_s", bench_negatives(1_000_000, 10))
    emit("negatives_queries_per_s_depth100", bench_negatives(100_000, 100))
    words, docs = bench_df(synthetic_documents(10_000, 1100))
    emit("df_words_per_s", words)
    emit("df_docs_per_s_1100_words", docs)


def bench_rerank(root: Path) -> None:
    """Re-ranking throughput (docs/s) of each registered model on the toy world's BM25 top-100, on CPU."""
    from leakexp.runner.registry import compose
    from leakexp.models import REGISTRY
    from leakexp.models.capreolus import IdfTable
    from leakexp.stages.rerank import rerank
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner
    from leakexp.lib.trainer import set_seed

    cfg = compose([f"store={root / 'rerank'}"])
    r = runner(cfg)
    run = r.get(Ask.of("firststage", corpus="toy_robust"))
    docs = r.get(Ask.of("collection", corpus="toy_robust")).docs
    for name, cls in REGISTRY.items():
        params = _model_params(r, cfg, name)  # the demo's settings, embedded weights resolved
        batch = cfg.model_of(name).train.score_batch_size
        set_seed(0)
        model = cls(**params)
        if model.needs_idf:  # the df table of the collection being ranked
            model.use_idf(IdfTable.from_docs(text for _, text in docs))
        rerank(model, run.head(200), docs, batch_size=batch)  # warm-up
        start = time.perf_counter()
        rerank(model, run, docs, batch_size=batch)
        emit(f"rerank_{name}_docs_per_s_cpu", len(run) / (time.perf_counter() - start))


def _model_params(r, cfg, name: str) -> dict:
    """A model's constructor parameters as the settings ``cfg`` resolve them (its file, the experiment's overrides),
    with the artifacts its class reads in place of a setting (the embedded monoT5's tokenizer: the t5vocab stage)."""
    from leakexp.models import get
    from leakexp.models.base import with_artifacts
    from leakexp.runner.stage import Ask

    settings = cfg.model_of(name)
    params = {k: v for k, v in cfg.values["models"][name].items() if k not in ("train", "name")}
    return with_artifacts(get(name), settings, params, lambda n: r.get(Ask.of(get(name).artifacts(settings)[n].stage)))


def _embedded_model(r, cfg, name):
    from types import SimpleNamespace

    from leakexp.runner.config import model_config
    from leakexp.models import REGISTRY
    from leakexp.runner.stage import Ask

    params = model_config(name)  # the model file: the paper's settings
    train_cfg = params.pop("train", {})
    params.pop("name", None)
    for a in REGISTRY[name].artifacts(SimpleNamespace(**params)).values():  # the embedded monoT5's tokenizer
        params[a.setting] = str(r.get(Ask.of(a.stage)))
    model = REGISTRY[name](**params)
    if model.needs_idf:  # training: the df table of the training pool's documents
        from leakexp.models.capreolus import IdfTable

        model.use_idf(IdfTable.from_docs(text for _, text in r.get(Ask.of("pool")).docs))
    return model, train_cfg


def bench_train(root: Path) -> None:
    """Training throughput per model on this CPU, with each model file's settings and the embedded weights."""
    import pandas as pd

    from leakexp.runner.registry import compose
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner
    from leakexp.lib.trainer import Training, set_seed, train

    cfg = compose([f"store={root / 'train'}"])
    r = runner(cfg)
    data = pd.read_parquet(r.ensure(Ask.of("build", corpus="toy_robust", leakage="none", size=128)) / "instances.parquet")
    for name in ("monot5", "monobert", "knrm", "duet", "pacrr"):
        set_seed(0)
        model, tc = _embedded_model(r, cfg, name)
        figs = train(model, data, seed=0, cfg=Training.of(tc, {"epochs": 1}), progress=False)
        emit(f"train_{name}_instances_per_s_cpu", figs["instances_per_s"])
        bench_checkpoint_verify(model, name, root / "checkpoints" / name)


def bench_checkpoint_verify(model, name: str, out: Path) -> None:
    """What checking a checkpoint against its recorded checksums costs when the runner loads it (warm pages)."""
    from leakexp.runner.store import file_table

    model.save(out)
    file_table(out)  # warm the page cache: what is measured is the hashing
    start = time.perf_counter()
    table = file_table(out)
    seconds = time.perf_counter() - start
    mib = sum(f["size"] for f in table.values()) / 2**20
    emit(f"checkpoint_verify_s_{name}", round(seconds, 4))
    emit(f"checkpoint_verify_mib_{name}", round(mib, 1))
    emit(f"checkpoint_verify_mib_per_s_{name}", round(mib / max(seconds, 1e-9), 1))


def bench_monot5(root: Path) -> None:
    """leakexp's monoT5 re-ranker against pyterrier-t5's MonoT5ReRanker: same weights, same truncation (pyterrier-t5
    keeps the prompt; leakexp's default cuts as PyGaggle does, reported apart), 50 queries x 100 docs."""
    import numpy as np
    import pandas as pd
    from pyterrier_t5 import MonoT5ReRanker

    from leakexp.runner.registry import compose
    from leakexp.models import load_checkpoint
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner
    from leakexp.lib.trainer import set_seed

    cfg = compose([f"store={root / 'monot5'}"])
    r = runner(cfg)
    set_seed(0)
    model, _ = _embedded_model(r, cfg, "monot5")
    ckpt = root / "monot5-ckpt"
    model.save(ckpt)
    coll = r.get(Ask.of("collection", corpus="toy_robust"))
    docs = list(coll.docs)
    rng = np.random.default_rng(0)
    topics = [t for c in r.settings.data.corpora for t in r.get(Ask.of("collection", corpus=c)).topics.values()]
    queries = list(dict.fromkeys([t.title for t in topics] + [v for t in topics for v in t.variants]))[:50]
    rows = []
    for i, q in enumerate(queries):
        for j in rng.choice(len(docs), 100, replace=False):
            rows.append((str(i), q, docs[j][0], docs[j][1]))
    run = pd.DataFrame(rows, columns=["qid", "query", "docno", "text"])
    like = load_checkpoint(ckpt)
    like.hparams["truncation"] = "keep_prompt"  # pyterrier-t5's cut (the prompt always fits): like with like
    ours = like.transformer(batch_size=32)
    ours(run.head(64))  # warm-up
    start = time.perf_counter()
    a = ours(run)
    t_ours = time.perf_counter() - start
    pygaggle = load_checkpoint(ckpt).transformer(batch_size=32)(run)  # leakexp's default cut, for the record
    timings, scores = {}, {}
    for bs in (4, 1):  # 4 = pyterrier-t5's default; 1 = no padding inside its prompt splice
        theirs = MonoT5ReRanker(tok_model=str(ckpt), model=str(ckpt), batch_size=bs, verbose=False, device="cpu")
        theirs.transform(run.head(8))
        start = time.perf_counter()
        b = theirs.transform(run)
        timings[bs] = time.perf_counter() - start
        scores[bs] = b.set_index(["qid", "docno"]).score
    mine = a.set_index(["qid", "docno"]).score
    emit("rerank_monot5_docs", len(run))
    emit("rerank_monot5_docs_per_s_leakexp", len(run) / t_ours)
    emit("rerank_monot5_docs_per_s_pyterrier_t5", len(run) / timings[4])
    emit("rerank_speedup_vs_pyterrier_t5", timings[4] / t_ours)
    emit("rerank_speedup_vs_pyterrier_t5_batch1", timings[1] / t_ours)
    emit("rerank_max_abs_score_diff_vs_pyterrier_t5", float((mine - scores[1].loc[mine.index]).abs().max()))
    emit("rerank_max_abs_score_diff_vs_pyterrier_t5_batch4", float((mine - scores[4].loc[mine.index]).abs().max()))
    other = pygaggle.set_index(["qid", "docno"]).score
    emit("rerank_max_abs_score_diff_pygaggle_vs_keep_prompt_truncation", float((other - mine.loc[other.index]).abs().max()))


def bench_graph(root: Path) -> None:
    """The A-leakage audit on WordNet-size synthetic graphs (~100k vertices, 150k edges, 70/5/25 edge split):
    paths of all held-out edges (one early-stopped BFS per head vertex), against a full SciPy BFS per head."""
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order

    from leakexp.toolkit import graph

    for name, crosslinks in (("graph", 1.0), ("graph_giant", 3.0)):  # 3.0: one component of ~2/3 of the graph
        edges = graph.synthetic_graph(seed=0, concepts=12_500, crosslinks=crosslinks)
        edges = graph.edge_split(edges.sample(n=150_000, random_state=0).sort_index(), seed=0)
        vertices, h, t = graph.vertex_index(edges)
        train = (edges.split == "train").to_numpy()
        g = graph.TrainingGraph(vertices, h[train], t[train], (edges.label == "antonym").to_numpy()[train])
        start = time.perf_counter()
        paths = graph.held_out_paths(edges, progress=False)
        seconds = time.perf_counter() - start
        sources = np.unique(h[~train])
        adj = csr_matrix((np.ones(len(g.indices)), g.indices, g.indptr), shape=(g.n, g.n))
        sample = sources[:: max(1, len(sources) // 1000)]
        start = time.perf_counter()
        for s in sample:
            breadth_first_order(adj, int(s), directed=False, return_predecessors=True)
        full_bfs = (time.perf_counter() - start) / len(sample) * len(sources)
        emit(f"{name}_vertices", len(vertices))
        emit(f"{name}_edges", len(edges))
        emit(f"{name}_largest_train_component", int(np.bincount(g.component).max()))
        emit(f"{name}_held_out_edges", len(paths))
        emit(f"{name}_bfs_sources", len(sources))
        emit(f"{name}_paths_s", seconds)
        emit(f"{name}_held_out_edges_per_s", len(paths) / seconds)
        emit(f"{name}_scipy_full_bfs_per_source_estimate_s", full_bfs)
        emit(f"{name}_test_a_parity_accuracy", float(paths[paths.applicable & (paths.split == "test")].correct.mean()))
        emit(f"{name}_test_applicability", float(paths[paths.split == "test"].applicable.mean()))
    start = time.perf_counter()
    graph.graph_audit(edges, root / "graph", name="giant")
    emit("graph_giant_full_audit_s", time.perf_counter() - start)
    wordnet = Path(os.environ.get("LEAKEXP_WORDNET", "/usr/share/wordnet"))
    if (wordnet / "data.noun").is_file():  # all WordNet noun synonym/antonym pairs (~90k vertices, ~106k edges)
        edges = graph.edge_split(graph.wordnet_pairs(wordnet, "noun", vocabulary="all", balance=False), seed=0)
        start = time.perf_counter()
        paths = graph.held_out_paths(edges, progress=False)
        emit("graph_wordnet_noun_edges", len(edges))
        emit("graph_wordnet_noun_held_out_edges", len(paths))
        emit("graph_wordnet_noun_paths_s", time.perf_counter() - start)

def _peak_reset() -> None:
    """Start a new peak-RSS window (Linux: /proc/self/clear_refs 5 resets VmHWM)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_mib() -> float:
    """Peak resident memory of the process since the last reset (VmHWM), else its maximum (getrusage)."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_audit(root: Path) -> None:
    """The audit's search, decontamination and ReSTTest clustering at 1M training x 10k test random unit
    vectors read from a memmap, against a bare Faiss IndexFlatIP search of the same vectors in memory.

    The dimension is small (LEAKEXP_BENCH_AUDIT_DIM, default 64) so that the section stays within minutes on
    2 cores; exact search time grows linearly with it (MiniLM's 384 takes about 6x as long). 100 test
    queries get 150 planted near-duplicates each, so the exhaustive path for saturated top-k lists runs too.
    Peak memory is the process's resident peak during each step (the memmap's cached pages included).
    """
    import faiss
    import numpy as np

    from leakexp.toolkit.overlap import nearest, train_best_match
    from leakexp.toolkit.resample import kmeans_buckets

    n_train = int(os.environ.get("LEAKEXP_BENCH_AUDIT_TRAIN", 1_000_000))
    n_test = int(os.environ.get("LEAKEXP_BENCH_AUDIT_TEST", 10_000))
    dim = int(os.environ.get("LEAKEXP_BENCH_AUDIT_DIM", 64))
    k, threshold, planted, dups = 100, 0.91, 100, 150
    rng = np.random.default_rng(0)

    def unit(x):
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    test = unit(rng.standard_normal((n_test, dim), dtype=np.float32))
    path = root / "audit-train.f32"
    mm = np.memmap(path, dtype=np.float32, mode="w+", shape=(n_train, dim))
    for s in range(0, n_train, 100_000):
        mm[s:s + 100_000] = unit(rng.standard_normal((min(100_000, n_train - s), dim), dtype=np.float32))
    for i in range(planted):
        mm[i * dups:(i + 1) * dups] = unit(test[i] + 0.02 * rng.standard_normal((dups, dim), dtype=np.float32))
    mm.flush()
    del mm
    train = np.memmap(path, dtype=np.float32, mode="r", shape=(n_train, dim))
    emit("audit_train_vectors", n_train)
    emit("audit_test_vectors", n_test)
    emit("audit_dim", dim)
    emit("audit_k", k)
    emit("audit_threads", faiss.omp_get_max_threads())
    _peak_reset()
    emit("audit_rss_before_mib", _peak_mib())  # peaks below are of the whole process, this included

    float(np.asarray(train[::1024]).sum() + np.asarray(train).sum())  # page the memmap in: both timings warm
    _peak_reset()
    start = time.perf_counter()
    sims, ids = nearest(train, test, k)
    audit_s = time.perf_counter() - start
    audit_mib = _peak_mib()

    _peak_reset()
    start = time.perf_counter()
    best, _ = train_best_match(train, test, sims, ids, threshold)
    decon_s = time.perf_counter() - start
    decon_mib = _peak_mib()

    _peak_reset()
    start = time.perf_counter()
    kmeans_buckets([train, test], 5, seed=0, sample=100_000)
    kmeans_s = time.perf_counter() - start
    kmeans_mib = _peak_mib()

    _peak_reset()
    start = time.perf_counter()
    index = faiss.IndexFlatIP(dim)
    index.add(np.ascontiguousarray(train))
    bare_sims, bare_ids = index.search(test, k)
    bare_s = time.perf_counter() - start
    bare_mib = _peak_mib()

    emit("audit_search_top100_s", audit_s)
    emit("audit_search_peak_mib", audit_mib)
    emit("audit_bare_faiss_search_s", bare_s)
    emit("audit_bare_faiss_peak_mib", bare_mib)
    emit("audit_search_over_bare_ratio", audit_s / bare_s)
    emit("audit_search_max_abs_diff_vs_bare", float(np.abs(sims - bare_sims).max()))
    emit("audit_saturated_test_queries", int((sims[:, -1] > threshold).sum()))
    emit("audit_decontaminate_s", decon_s)
    emit("audit_decontaminate_peak_mib", decon_mib)
    emit("audit_decontaminate_removed", int((best > threshold).sum()))
    emit("audit_resttest_kmeans_s", kmeans_s)
    emit("audit_resttest_kmeans_peak_mib", kmeans_mib)
    emit("audit_memmap_mib", n_train * dim * 4 / 2**20)


WORD_MODELS = ("knrm", "pacrr", "duet")


def write_real_size_glove(path: Path, words: int = 400_000, dim: int = 300) -> Path:
    """A GloVe-format text file of glove.6B.300d's size (400k words x 300 values, ~1 GB): the words of
    leakexp.models.paper's synthetic vocabulary first, then filler words; values are drawn from a pool of 2,000
    random vectors written with GloVe's ~6 significant digits (the parser's work is the same)."""
    import numpy as np

    from leakexp.models.paper import VOCAB

    rng = np.random.default_rng(0)
    pool = [" ".join(f"{x:.6g}" for x in v) for v in rng.normal(0, 0.4, (2000, dim))]
    names = VOCAB + [f"x{i}" for i in range(words - len(VOCAB))]
    with open(path, "w", encoding="utf-8") as f:
        for s in range(0, words, 20_000):
            f.write("".join(f"{names[i]} {pool[i % len(pool)]}\n" for i in range(s, min(words, s + 20_000))))
    return path


_STARTUP_CHILD = """
import sys, time
t0 = float(sys.argv[1])
from leakexp.models.paper import PaperModels, synthetic_pairs
from leakexp.models import get
from leakexp.models.capreolus import IdfTable
from leakexp.lib.trainer import Training, set_seed, train
name, glove = sys.argv[2], sys.argv[3]
paper = PaperModels(sys.argv[4])
set_seed(0)
model = get(name)(**dict(paper.params(name), embeddings=glove))
data = synthetic_pairs(32, doc_words=700)
if model.needs_idf:
    model.use_idf(IdfTable.from_docs(data.text))
train(model, data, seed=0, cfg=Training.of_model(name, updates=1), progress=False)
print(time.time() - t0)
"""


def bench_pipeline(root: Path) -> None:
    """What a CPU can measure of a GPU job's fixed and per-instance costs, and the ties bf16 would create.

    ``startup_s_<model>``: process start to the end of the first training update (imports, config, the real-size
    GloVe read through its cache, model, one update of 32 pairs at 800 tokens), per KNRM / PACRR / DUET job.
    ``data_pipeline_instances_per_s_<model>``: training instances/s that the training loop's data pipeline (gather
    the stored token ids of a batch, collate them into tensors) delivers on one CPU core at the paper's shapes
    (700-word documents; t5-base / bert-base tokenizers' kind); ``data_pipeline_from_texts_…``: the same batches
    tokenised from their texts, as every batch was before documents were encoded once; ``encode_docs_per_s_…``:
    that one-time encoding (the tokens stage, once per training set or corpus).
    ``ties_per_query_{fp32,bf16}_<model>``: documents per query sharing their score with another, when each model
    (embedded weights, the model file's settings, one epoch on a toy training set of 128 instances) re-ranks 30
    queries of toy_robust's BM25 top-100, in fp32 and under CPU bf16 autocast.
    """
    import dataclasses
    import subprocess

    import pandas as pd
    import torch

    from leakexp.runner.registry import compose
    from leakexp.models.base import ties_per_query
    from leakexp.models.paper import PaperModels, synthetic_pairs
    from leakexp.models.vectors import load_word_vectors
    from leakexp.stages.rerank import rerank
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner
    from leakexp.lib.trainer import PairBatches, Training, micro_batches, pairs_of, set_seed, train

    torch.set_num_threads(1)
    glove = write_real_size_glove(root / "glove.6B.300d-size.txt")
    env = dict(os.environ, LEAKEXP_VECTORS_CACHE=str(root / "vectors-cache"))
    os.environ["LEAKEXP_VECTORS_CACHE"] = env["LEAKEXP_VECTORS_CACHE"]
    emit("glove_file_mib", glove.stat().st_size / 2**20)
    start = time.perf_counter()
    load_word_vectors(str(glove))  # parses the text once and writes the cache (what every job paid before)
    emit("glove_parse_and_cache_s", time.perf_counter() - start)
    load_word_vectors.cache_clear()
    for name in WORD_MODELS:
        t0 = time.time()
        out = subprocess.run([sys.executable, "-c", _STARTUP_CHILD, repr(t0), name, str(glove), str(root / "paper")],
                             env=env, capture_output=True, text=True, check=True)
        emit(f"startup_s_{name}", float(out.stdout.strip().splitlines()[-1]))

    paper = PaperModels(root / "paper")
    data = synthetic_pairs(256, doc_words=700, seed=7)
    pos, neg = pairs_of(data)
    for name in ("knrm", "pacrr", "duet", "monobert", "monot5"):
        set_seed(0)
        model = paper.build(name) if name not in WORD_MODELS else None
        if model is None:
            from leakexp.models import get
            from leakexp.models.capreolus import IdfTable

            model = get(name)(**dict(paper.params(name), embeddings=str(glove)))
            if model.needs_idf:
                model.use_idf(IdfTable.from_docs(synthetic_pairs(200, doc_words=300, seed=1).text))
        tc = Training.of_model(name)
        batches = micro_batches(len(pos), tc.model_copy(update=dict(epochs=1, updates=None)), 0)
        # once per training set (the tokens stage): every document encoded
        start = time.perf_counter()
        docs = model.encode_docs(data.drop_duplicates("docno").text.tolist())
        emit(f"encode_docs_per_s_{name}", len(docs) / (time.perf_counter() - start))
        docs.keys = data.drop_duplicates("docno").docno.tolist()
        # per batch, what the training loop's data pipeline does now: gather token ids and collate
        start = time.perf_counter()
        batches_data = PairBatches.of(model, pos, neg, batches, docs)
        for i in range(len(batches_data)):
            batches_data[i]
        emit(f"data_pipeline_instances_per_s_{name}", 2 * len(pos) / (time.perf_counter() - start))
        # what it did before: tokenise both texts of every instance in every batch
        start = time.perf_counter()
        for idx in batches:
            p, n = pos.iloc[idx], neg.iloc[idx]
            if model.objective == "pairwise":
                model.featurize(p["query"].tolist(), p["text"].tolist())
                model.featurize(n["query"].tolist(), n["text"].tolist())
            else:
                model.featurize(p["query"].tolist() + n["query"].tolist(), p["text"].tolist() + n["text"].tolist())
        emit(f"data_pipeline_from_texts_instances_per_s_{name}", 2 * len(pos) / (time.perf_counter() - start))
        del model

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    cfg = compose([f"store={root / 'pipeline'}"])
    r = runner(cfg)
    data = pd.read_parquet(r.ensure(Ask.of("build", corpus="toy_robust", leakage="none", size=128)) / "instances.parquet")
    run = r.get(Ask.of("firststage", corpus="toy_robust"))
    run = run[run.qid.isin(run.qid.drop_duplicates().head(30))]
    docs = r.get(Ask.of("collection", corpus="toy_robust")).docs
    for name in ("knrm", "pacrr", "duet", "monobert", "monot5"):
        set_seed(0)
        model, tc = _embedded_model(r, cfg, name)
        train(model, data, seed=0, cfg=Training.of(tc, {"epochs": 1}), progress=False)
        if model.needs_idf:
            from leakexp.models.capreolus import IdfTable

            model.use_idf(IdfTable.from_docs(text for _, text in docs))
        emit(f"ties_per_query_fp32_{name}", ties_per_query(rerank(model, run, docs, batch_size=32)))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            emit(f"ties_per_query_bf16_{name}", ties_per_query(rerank(model, run, docs, batch_size=32)))


def bench_ties(root: Path) -> None:
    """``ties_per_query_{fp32,fp16}_<model>``: documents per query sharing their score with another in KNRM's,
    PACRR's and DUET's re-ranking of 30 queries of toy_robust's BM25 top-100 (embedded weights, the model file's
    settings, one epoch on a toy training set of 128 instances), with the scores as the models give them (fp32)
    and rounded to float16 as Capreolus stores them (``models.<model>.score_dtype: float16``, experiment=paper):
    the documents whose order the docno tie-break decides."""
    import pandas as pd
    import torch

    from leakexp.models.base import ties_per_query
    from leakexp.runner.registry import compose
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner
    from leakexp.stages.rerank import rerank
    from leakexp.lib.trainer import Training, set_seed, train

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    cfg = compose([f"store={root / 'ties'}"])
    r = runner(cfg)
    data = pd.read_parquet(r.ensure(Ask.of("build", corpus="toy_robust", leakage="none", size=128)) / "instances.parquet")
    run = r.get(Ask.of("firststage", corpus="toy_robust"))
    run = run[run.qid.isin(run.qid.drop_duplicates().head(30))]
    docs = r.get(Ask.of("collection", corpus="toy_robust")).docs
    for name in WORD_MODELS:
        set_seed(0)
        model, tc = _embedded_model(r, cfg, name)
        train(model, data, seed=0, cfg=Training.of(tc, {"epochs": 1}), progress=False)
        if model.needs_idf:
            from leakexp.models.capreolus import IdfTable

            model.use_idf(IdfTable.from_docs(text for _, text in docs))
        for dtype, label in (("float32", "fp32"), ("float16", "fp16")):
            emit(f"ties_per_query_{label}_{name}",
                 ties_per_query(rerank(model, run, docs, batch_size=32, score_dtype=dtype)))


# Peak dense bf16 tensor throughput (TFLOP/s, no sparsity) from NVIDIA's data sheets; LEAKEXP_PEAK_TFLOPS overrides.
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.4), ("H200", 989.4), ("GH200", 989.4),
                    ("A100", 312.0), ("L40S", 362.1), ("L4", 121.0), ("A10", 125.0))


def peak_tflops(device_name: str) -> float | None:
    if os.environ.get("LEAKEXP_PEAK_TFLOPS"):
        return float(os.environ["LEAKEXP_PEAK_TFLOPS"])
    for key, value in PEAK_BF16_TFLOPS:
        if key in device_name:
            return value
    return None


def count_flops(fn) -> int:
    """FLOPs of what ``fn`` runs, counted by torch's FlopCounterMode: matmuls, convolutions and attention
    (2 per multiply-add), backward included when ``fn`` calls it; elementwise ops are not counted."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def bench_gpu(root: Path) -> None:
    """Training instances/s and re-ranking docs/s of each model at the paper's settings on CUDA, with the model FLOPs
    utilisation they imply; written to <store>/bench/gpu.json for `leakexp plan`.

    Models: t5-base / bert-base-uncased architectures (random weights; speed does not depend on the values) at
    512 tokens, KNRM / PACRR / DUET with 300-d vectors at 800 document tokens; inputs are synthetic documents of
    900 words, so every input is at the length limit. Training uses each model file's batch size, accumulation,
    optimiser and schedule, 100 updates (LEAKEXP_BENCH_UPDATES), documents encoded once and batches collated by the
    loader's workers (loader_workers=auto), as a grid cell trains; re-ranking its score_batch_size over documents
    encoded once, as the rerank stage scores. MFU = FLOPs per instance (FlopCounterMode on one micro-batch: forward +
    backward for training, forward for re-ranking) x instances/s / peak bf16 FLOP/s.

    monoT5 and monoBERT are measured in rows, one run each (:func:`bench_fast_path`): ``baseline`` (the path before
    the fast one: fp32 weights under autocast, eager kernels, a mask in every batch, the model file's score batch)
    and ``fast`` (what experiment=paper runs on CUDA: its scoring weights, compiled cores, its score batch), plus
    monoT5's options beyond the reference and monoBERT's bf16 weights; the file's figures are the ``fast`` row's.

    LEAKEXP_BENCH_DEVICE=cpu runs the section on a CPU (no file written unless LEAKEXP_BENCH_FILE names one);
    LEAKEXP_BENCH_SHAPES=tiny: small monoT5 / monoBERT (the CPU test of this section); LEAKEXP_BENCH_MODELS: a subset;
    LEAKEXP_BENCH_EAGER=1: the fast rows without torch.compile (the quick CPU test).
    """
    import dataclasses

    import numpy as np
    import torch

    from leakexp.runner.config import model_config

    device = os.environ.get("LEAKEXP_BENCH_DEVICE", "cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu: no CUDA device here; GPU figures skipped (run `python benchmarks/run.py gpu` on a GPU machine)")
        return
    on_gpu = device.startswith("cuda")
    names = os.environ.get("LEAKEXP_BENCH_MODELS", "monot5,monobert,knrm,duet,pacrr").split(",")
    from leakexp.models.paper import PaperModels, synthetic_pairs
    from leakexp.runner.store import atomic_write_json
    from leakexp.lib.trainer import PairBatches, Training, batch_loss, loader_workers, pairs_of, set_seed, train
    from leakexp.runner.jobs import configure_precision

    configure_precision("highest")
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    device_name = torch.cuda.get_device_name(0) if on_gpu else "cpu"
    peak = peak_tflops(device_name) if on_gpu else None
    emit("gpu_device", device_name)
    emit("gpu_peak_bf16_tflops_assumed", peak if peak is not None else "unknown (set LEAKEXP_PEAK_TFLOPS)")
    paper = PaperModels(root / "paper-models", shapes=os.environ.get("LEAKEXP_BENCH_SHAPES", "paper"))
    n_updates = int(os.environ.get("LEAKEXP_BENCH_UPDATES", 100))  # a realistic budget: >= 100 updates
    out = {"device": device_name, "peak_bf16_tflops": peak, "torch": torch.__version__, "shapes": paper.shapes,
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "models": {}}
    for name in names:
        if name in ("monot5", "monobert"):
            out["models"][name] = bench_fast_path(name, paper, device, peak, n_updates)
            continue
        set_seed(0)
        model = paper.build(name).to(device)
        cfg = Training.of_model(name)
        per_update = cfg.batch_size * cfg.grad_accum
        data = synthetic_pairs(per_update * min(n_updates, 20), doc_words=900)  # passes repeat beyond 20 updates
        # the documents encoded once, as the tokens stage stores them; batches collated by the loader's workers
        unique = data.drop_duplicates("docno")
        docs = model.encode_docs(unique.text.tolist())
        docs.keys = unique.docno.tolist()
        workers = loader_workers("auto", device)
        train(model, data, seed=0, cfg=cfg.model_copy(update=dict(updates=2)), device=device, progress=False,
              docs=docs, workers=workers)  # warm-up
        sync()
        result = train(model, data, seed=1, cfg=cfg.model_copy(update=dict(updates=n_updates)), device=device,
                       progress=False, docs=docs, workers=workers)
        train_ips = result["instances_per_s"]
        pos, neg = pairs_of(data)
        one = PairBatches.of(model, pos, neg, [np.arange(cfg.batch_size)])[0]

        def step():
            batch_loss(model, one, device, cfg.bf16).backward()

        train_flops = count_flops(step) / (2 * cfg.batch_size)
        model.zero_grad(set_to_none=True)
        score_batch = int(model_config(name)["train"].get("score_batch_size", 64))
        query_rows, doc_rows, _, _ = _scoring_inputs(model, data, 8192)
        model.score_tokens(query_rows, doc_rows, batch_size=score_batch, device=device)  # warm-up
        sync()
        start = time.perf_counter()
        model.score_tokens(query_rows, doc_rows, batch_size=score_batch, device=device, bf16=True)
        rerank_dps = len(doc_rows) / (time.perf_counter() - start)
        rerank_flops = _forward_flops(model, query_rows, doc_rows, score_batch, device) / score_batch
        fig = {"train_instances_per_s": train_ips, "rerank_docs_per_s": round(rerank_dps, 1),
               "train_flops_per_instance": train_flops, "rerank_flops_per_doc": rerank_flops,
               "train_mfu": _mfu(train_flops, train_ips, peak), "rerank_mfu": _mfu(rerank_flops, rerank_dps, peak),
               "settings": {"batch_pairs": cfg.batch_size, "grad_accum": cfg.grad_accum, "updates": n_updates,
                            "score_batch_size": score_batch, "bf16": cfg.bf16, "loader_workers": workers,
                            "maxdoclen": getattr(model, "maxdoclen", None)}}
        out["models"][name] = fig
        emit(f"gpu_train_{name}_instances_per_s", train_ips)
        emit(f"gpu_rerank_{name}_docs_per_s", rerank_dps)
        if peak:
            emit(f"gpu_train_{name}_mfu", fig["train_mfu"])
            emit(f"gpu_rerank_{name}_mfu", fig["rerank_mfu"])
        del model
        if on_gpu:
            torch.cuda.empty_cache()
    target = os.environ.get("LEAKEXP_BENCH_FILE")
    if not on_gpu and not target:
        print("gpu: CPU dry run, no bench file written")
        return
    path = Path(target) if target else Path(os.environ.get("LEAKEXP_STORE", "store")) / "bench" / "gpu.json"
    atomic_write_json(path, out)
    emit("gpu_bench_file", str(path))


def _mfu(flops: float, rate: float, peak: float | None) -> float | None:
    return flops * rate / (peak * 1e12) if peak else None


def _scoring_inputs(model, data, n_docs: int):
    """``n_docs`` (query, document) rows of ``data`` as the rerank stage scores them: documents and queries encoded
    once (the tokens stage), then batches of ids; and their texts."""
    queries, docs = data["query"].tolist(), data["text"].tolist()
    queries = (queries * math.ceil(n_docs / len(queries)))[:n_docs]
    docs = (docs * math.ceil(n_docs / len(docs)))[:n_docs]
    doc_rows = model.encode_docs(docs)
    return model.encode_queries(queries, doc_rows), doc_rows, queries, docs


def _forward_flops(model, query_rows, doc_rows, batch: int, device: str) -> int:
    """FLOPs of one eager scoring batch of ``batch`` rows (model FLOPs: the same for every row of the benchmark)."""
    import numpy as np
    import torch

    idx = np.arange(min(batch, len(doc_rows)))
    feats = {k: v.to(device) for k, v in model.collator()(query_rows.take(idx), doc_rows.take(idx)).items()}

    def forward():
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.startswith("cuda")):
            model.eval()(**feats)

    return count_flops(forward)


def _paper_compute() -> dict:
    """How experiment=paper computes monoT5 and monoBERT on CUDA: its precision section and each model's cuda block
    (the settings the stages read there)."""
    from leakexp.runner.registry import compose

    s = compose(["experiment=paper"])
    return {"precision": s.precision, **{m: s.model_of(m) for m in ("monot5", "monobert")}}


def bench_fast_path(name: str, paper, device: str, peak: float | None, n_updates: int) -> dict:
    """monoT5 or monoBERT, scoring and training, in rows measured in one run: ``baseline`` (fp32 weights under
    autocast, eager, a mask in every batch, the decoder's cache, unpinned batches, the model file's score batch),
    ``fast`` (experiment=paper on CUDA) and the options a GPU must measure before they are kept (monoT5:
    ``fast_beyond``, the position bias once and single-query cross-attention; monoBERT: ``fast_bf16_weights``). Per
    row: docs/s or instances/s, MFU, compile seconds apart (the first call less a steady one), peak device memory
    (MiB; CUDA only) and, scoring, the largest |score - fp32 eager score| over the same documents (the baseline's is
    bf16 autocast's noise floor)."""
    import dataclasses

    import numpy as np
    import torch

    from leakexp.lib.trainer import PairBatches, Training, batch_loss, loader_workers, pairs_of, set_seed, train
    from leakexp.models.compute import Compute
    from leakexp.stages.train import on_cuda

    on_gpu = device.startswith("cuda")
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    setup = _paper_compute()
    precision, settings = setup["precision"], setup[name]
    compile_ = os.environ.get("LEAKEXP_BENCH_EAGER") != "1"  # 1: the fast rows without torch.compile (a quick check)
    base_batch, fast_batch = settings.train.score_batch_size, settings.cuda.score_batch_size or settings.train.score_batch_size
    fast = Compute(bf16_weights=precision.rerank_bf16 and settings.cuda.rerank_weights == "bf16",
                   compile=precision.rerank_compile and settings.cuda.rerank_compile and compile_)
    rows = {"baseline": (Compute(legacy=True), base_batch), "fast": (fast, fast_batch)}
    if name == "monot5":
        rows["fast_beyond"] = (dataclasses.replace(fast, bias_once=True, single_query=True), fast_batch)
    else:
        rows["fast_bf16_weights"] = (dataclasses.replace(fast, bf16_weights=True), fast_batch)
    if not fast.compile and compile_:  # a model experiment=paper scores eagerly: its compiled scoring measured too
        rows["fast_compiled"] = (dataclasses.replace(fast, compile=True), fast_batch)

    def peak_mib() -> float | None:
        return round(torch.cuda.max_memory_allocated() / 2**20, 1) if on_gpu else None

    def reset_peak() -> None:
        if on_gpu:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def build(compute: Compute):
        set_seed(0)
        return paper.build(name).to(device).use(compute)

    base_cfg = Training.of_model(name, **({"grad_accum": 1} if paper.shapes == "tiny" else {}))  # tiny: quick
    per_update = base_cfg.batch_size * base_cfg.grad_accum
    data = synthetic_pairs_for(paper, per_update * min(n_updates, 20))
    n_docs = 2048 if paper.shapes == "paper" else 64
    fig: dict = {"rows": {}}

    # scoring: an fp32 eager reference, then each row on the same documents
    model = build(Compute())
    query_rows, doc_rows, _, _ = _scoring_inputs(model, data, n_docs)
    reference = model.score_tokens(query_rows, doc_rows, batch_size=base_batch, device=device, bf16=False)
    flops_per_doc = _forward_flops(model, query_rows, doc_rows, base_batch, device) / min(base_batch, n_docs)
    del model
    for row, (compute, batch) in rows.items():
        reset_peak()
        model = build(compute)
        one = np.arange(min(batch, len(doc_rows)))
        sync()
        start = time.perf_counter()
        model.score_tokens(query_rows.take(one), doc_rows.take(one), batch_size=batch, device=device)  # compiles
        sync()
        first_s = time.perf_counter() - start
        start = time.perf_counter()
        scores = model.score_tokens(query_rows, doc_rows, batch_size=batch, device=device)
        sync()
        seconds = time.perf_counter() - start
        dps = len(doc_rows) / seconds
        r = {"docs_per_s": round(dps, 1), "mfu": _mfu(flops_per_doc, dps, peak), "score_batch_size": batch,
             "compile_s": round(max(0.0, first_s - seconds * batch / len(doc_rows)), 2), "peak_mib": peak_mib(),
             "max_diff_vs_fp32": float(np.abs(scores - reference).max()), "compute": dataclasses.asdict(compute)}
        fig["rows"][f"rerank_{row}"] = r
        for key in ("docs_per_s", "mfu", "compile_s", "peak_mib", "max_diff_vs_fp32"):
            if r[key] is not None:
                emit(f"gpu_rerank_{name}_{row}_{key}", r[key])
        del model

    # training: the model file's recipe, eager (baseline) and compiled (fast), fp32 weights under autocast
    shape = on_cuda({"batch_size": base_cfg.batch_size, "grad_accum": base_cfg.grad_accum},
                    {"micro_batch": settings.cuda.micro_batch})
    fast_cfg = base_cfg.model_copy(update=dict(**shape))
    for row, (compute, cfg) in {"baseline": (Compute(legacy=True), base_cfg),
                                "fast": (Compute(compile=precision.train_compile and compile_), fast_cfg)}.items():
        reset_peak()
        model = build(compute)
        unique = data.drop_duplicates("docno")
        docs = model.encode_docs(unique.text.tolist())
        docs.keys = unique.docno.tolist()
        workers = loader_workers("auto", device)
        sync()
        start = time.perf_counter()
        warm = train(model, data, seed=0, cfg=cfg.model_copy(update=dict(updates=min(2, n_updates))), device=device,
                     progress=False, docs=docs, workers=workers)  # compiles, if compiled
        sync()
        first_s = time.perf_counter() - start
        result = train(model, data, seed=1, cfg=cfg.model_copy(update=dict(updates=n_updates)), device=device,
                       progress=False, docs=docs, workers=workers)
        ips = result["instances_per_s"]
        if row == "baseline":
            pos, neg = pairs_of(data)
            one = PairBatches.of(model, pos, neg, [np.arange(cfg.batch_size)])[0]
            flops_per_instance = count_flops(lambda: batch_loss(model, one, device, cfg.bf16).backward()) / (
                2 * cfg.batch_size)
            model.zero_grad(set_to_none=True)
        r = {"instances_per_s": ips, "mfu": _mfu(flops_per_instance, ips, peak), "batch_pairs": cfg.batch_size,
             "grad_accum": cfg.grad_accum, "updates": n_updates, "peak_mib": peak_mib(),
             "compile_s": round(max(0.0, first_s - warm["instances"] / ips), 2), "compute": dataclasses.asdict(compute)}
        fig["rows"][f"train_{row}"] = r
        for key in ("instances_per_s", "mfu", "compile_s", "peak_mib"):
            if r[key] is not None:
                emit(f"gpu_train_{name}_{row}_{key}", r[key])
        del model
    if on_gpu:
        torch.cuda.empty_cache()
    train_fast, rerank_fast = fig["rows"]["train_fast"], fig["rows"]["rerank_fast"]
    fig.update({"train_instances_per_s": train_fast["instances_per_s"], "rerank_docs_per_s": rerank_fast["docs_per_s"],
                "train_flops_per_instance": flops_per_instance, "rerank_flops_per_doc": flops_per_doc,
                "train_mfu": train_fast["mfu"], "rerank_mfu": rerank_fast["mfu"],
                "compile_s": round(train_fast["compile_s"] + rerank_fast["compile_s"], 2),
                "settings": {"batch_pairs": fast_cfg.batch_size, "grad_accum": fast_cfg.grad_accum,
                             "updates": n_updates, "score_batch_size": fast_batch, "bf16": fast_cfg.bf16,
                             "max_length": paper.params(name)["max_length"]}})
    emit(f"gpu_train_{name}_instances_per_s", fig["train_instances_per_s"])
    emit(f"gpu_rerank_{name}_docs_per_s", fig["rerank_docs_per_s"])
    return fig


def synthetic_pairs_for(paper, n: int):
    """Training pairs whose documents reach the models' length limit (900 words: 512 tokens at the paper's shapes)."""
    from leakexp.models.paper import synthetic_pairs

    return synthetic_pairs(n, doc_words=900 if paper.shapes == "paper" else 200)


def stage_seconds(store: Path) -> dict[str, float]:
    """Seconds the artifacts of each stage took to compute in ``store`` (its ``logs/computed.tsv``), slowest first."""
    per_stage: dict[str, float] = {}
    log = store / "logs" / "computed.tsv"
    for line in (log.read_text().splitlines() if log.exists() else []):
        _, _, rel, seconds = line.split("\t")[:4]
        parts = rel.split("/")
        per_stage[parts[0]] = per_stage.get(parts[0], 0.0) + float(seconds)
        for model in MODELS & set(parts[1:]):  # a model's share of the stages that run it
            name = f"{parts[0]}_{model}"
            per_stage[name] = per_stage.get(name, 0.0) + float(seconds)
    return dict(sorted(per_stage.items(), key=lambda kv: -kv[1]))


MODELS = {"monot5", "monobert", "knrm", "duet", "pacrr"}


def bench_demo(root: Path) -> None:
    """The main job from scratch on this machine (`make demo`: the toy grid, memorization, robustness, the audits,
    the tables): its wall seconds and each stage's share, so the slowest stage is visible."""
    from leakexp.cli.main import main as leakexp

    store = root / "demo-store"
    start = time.perf_counter()
    rc = leakexp(["demo", f"store={store}"])
    emit("demo_wall_s", round(time.perf_counter() - start, 1))
    emit("demo_exit_code", rc)
    for stage, seconds in stage_seconds(store).items():
        emit(f"demo_stage_s_{stage}", round(seconds, 1))


def bench_plan(root: Path) -> None:
    """`leakexp plan` and `leakexp status` of the paper's grid (1,800 cells) before any data is in place, each in a
    fresh process as a user runs them (imports included): seconds. ``startup_s_measure``: `leakexp measure` of a
    100-topic run (100 documents per topic, 10 judgments per topic) in a fresh process, start to exit, and
    ``startup_cpu_s_measure`` the CPU seconds it took."""
    env = {**os.environ, "LEAKEXP_STORE": str(root / "plan-store")}
    for command in ("plan", "status"):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "leakexp.cli.main", command, "experiment=paper"], cwd=root,
                              env=env, capture_output=True, text=True)
        emit(f"{command}_paper_s", round(time.perf_counter() - start, 1))
        emit(f"{command}_paper_exit_code", proc.returncode)
    run, qrels = root / "measure.run", root / "measure.qrels"
    run.write_text("".join(f"{q} Q0 d{d} {d + 1} {100 - d} bench\n" for q in range(100) for d in range(100)))
    qrels.write_text("".join(f"{q} 0 d{7 * j + q % 7} {j % 3}\n" for q in range(100) for j in range(10)))
    import resource

    seconds, cpu = [], []
    for _ in range(3):  # the best of three: the figure of the command, not of whatever else the machine runs
        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "leakexp.cli.main", "measure", str(run), "--qrels", str(qrels),
                               "-m", "nDCG@10", "P@1", "RR", "MFR"], cwd=root, env=env, capture_output=True, text=True)
        seconds.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    emit("startup_s_measure", round(min(seconds), 2))
    emit("startup_cpu_s_measure", round(min(cpu), 2))  # CPU seconds: what a busy machine's wall time hides
    emit("startup_measure_exit_code", proc.returncode)


def _fresh_seconds(argv: list[str], cwd: Path, env: dict, runs: int = 3) -> tuple[float, int]:
    """The median wall seconds of ``leakexp ARGV`` in a fresh process (imports included) over ``runs`` runs, and the
    last run's exit code."""
    seconds, rc = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        rc = subprocess.run([sys.executable, "-m", "leakexp.cli.main", *argv], cwd=cwd, env=env,
                            capture_output=True, text=True).returncode
        seconds.append(time.perf_counter() - start)
    return sorted(seconds)[len(seconds) // 2], rc


def demo_store(root: Path) -> Path:
    """A finished demo store: $LEAKEXP_BENCH_DEMO_STORE, else the repository's ``store/`` where `make demo` left
    one, else one made now by `leakexp demo` (minutes)."""
    named = os.environ.get("LEAKEXP_BENCH_DEMO_STORE")
    if named:
        return Path(named)
    here = Path(__file__).resolve().parents[1] / "store"
    if (here / "evaluate").is_dir() and (here / "logs" / "computed.tsv").exists():
        return here
    store = root / "demo-store"
    if not (store / "evaluate").is_dir():
        print(f"startup: no finished demo store; making one in {store} (leakexp demo)", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "leakexp.cli.main", "demo", f"store={store}"], cwd=root, check=True,
                       capture_output=True)
    return store


def bench_startup(root: Path) -> None:
    """Each command that computes nothing, from process start to exit as a user runs it (median of three fresh
    processes): `--help`, `stages`, `plan` and `status` of the demo configuration (`status_demo`: of a finished demo
    store), `measure` of a 100-topic run, and `tables` of the finished demo store into a folder that holds them
    already (`tables_write_s_demo`: into an empty folder, the tables computed and written once). Goals: measure
    of 100 topics within 1 s, status of the demo store within 2 s."""
    # compiled modules kept, as an installed leakexp has them (the Makefile's setting; the median skips the first run)
    env = {**os.environ, "LEAKEXP_STORE": str(root / "startup-store"), "PYTHONDONTWRITEBYTECODE": ""}
    store = demo_store(root)
    run, qrels = root / "startup.run", root / "startup.qrels"
    run.write_text("".join(f"{q} Q0 d{d} {d + 1} {100 - d} bench\n" for q in range(100) for d in range(100)))
    qrels.write_text("".join(f"{q} 0 d{7 * j + q % 7} {j % 3}\n" for q in range(100) for j in range(10)))
    tables = root / "startup-tables"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "leakexp.cli.main", "tables", f"store={store}", "--out", str(tables)],
                   cwd=root, env=env, capture_output=True)
    emit("tables_write_s_demo", round(time.perf_counter() - start, 2))
    commands = {"help": ["--help"], "stages": ["stages"], "plan": ["plan"], "status_demo": ["status", f"store={store}"],
                "measure_100_topics": ["measure", str(run), "--qrels", str(qrels)],
                "tables_demo": ["tables", f"store={store}", "--out", str(tables)]}
    for name, argv in commands.items():
        seconds, rc = _fresh_seconds(argv, root, env)
        emit(f"startup_s_{name}", round(seconds, 2))
        if rc not in (0, 1):  # status: 1 while a store is incomplete
            emit(f"startup_{name}_exit_code", rc)


SECTIONS = {"detect": bench_detect, "build": bench_build, "rerank": bench_rerank, "train": bench_train,
            "monot5": bench_monot5, "pipeline": bench_pipeline, "graph": bench_graph, "audit": bench_audit,
            "gpu": bench_gpu, "demo": bench_demo, "ties": bench_ties,
            "plan": bench_plan, "startup": bench_startup}


def main(argv: list[str]) -> int:
    chosen = argv or list(SECTIONS)
    with tempfile.TemporaryDirectory(prefix="leakexp-bench-") as tmp:
        os.environ.setdefault("IR_DATASETS_HOME", str(Path(tmp) / "irds"))
        for name in chosen:
            if name not in SECTIONS:
                print(f"unknown section {name!r}; choose from {', '.join(SECTIONS)}", file=sys.stderr)
                return 2
            SECTIONS[name](Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
