"""Benchmarks: each prints measured figures as `name: value` lines (nothing here is typed in).

    python benchmarks/run.py            # all sections
    python benchmarks/run.py detect     # one section: detect | build
"""

from __future__ import annotations

import os
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

    from leakexp.config import compose
    from leakexp.detect import load_sbert, topic_fields
    from leakexp.pipeline import Pipeline

    cfg = compose([f"store={root / 'detect'}", "data.queries_per_source=5000"])
    p = Pipeline(cfg)
    pool, collections = p.pool, [p.collection(c) for c in p.corpora]
    load_sbert(cfg.detect.sbert)  # warm the file cache for both timings
    texts = pool.queries.text.tolist()
    topics = topic_fields(collections, list(cfg.detect.fields)).text.tolist()

    start = time.perf_counter()
    model = load_sbert(cfg.detect.sbert)
    q = {s: model.encode(pool.queries[pool.queries.source == s].text.tolist(), batch_size=int(cfg.detect.batch_size),
                         normalize_embeddings=True, convert_to_numpy=True) for s in ("msmarco", "orcas")}
    t = model.encode(topics, batch_size=int(cfg.detect.batch_size), normalize_embeddings=True, convert_to_numpy=True)
    search_start = time.perf_counter()
    for emb in q.values():
        index = faiss.IndexFlatIP(emb.shape[1])
        index.add(np.ascontiguousarray(emb, dtype=np.float32))
        index.search(np.ascontiguousarray(t, dtype=np.float32), int(cfg.detect.k))
    bare_search = time.perf_counter() - search_start
    bare = time.perf_counter() - start

    start = time.perf_counter()
    cands = p.candidates()
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
    """All training sets of the demo grid from a fresh store, and the paper-scale estimate."""
    from leakexp.config import compose
    from leakexp.pipeline import Pipeline
    from leakexp.retrieval import bm25_search

    cfg = compose([f"store={root / 'build'}"])
    p = Pipeline(cfg)
    p.candidates(), p.annotations(), p.index("train")  # upstream stages are not the builder's cost
    start = time.perf_counter()
    p.negatives()
    neg_s = time.perf_counter() - start
    start = time.perf_counter()
    n_sets, instances = 0, 0
    for c in cfg.grid.corpora:
        for l in cfg.grid.leakages:
            for s in cfg.grid.sizes:
                p.training_set(c, l, int(s))
                n_sets, instances = n_sets + 1, instances + int(s)
    sets_s = time.perf_counter() - start
    q = p.pool.queries.rename(columns={"text": "query"})[["qid", "query"]]
    start = time.perf_counter()
    bm25_search(p.index("train"), q, depth=100, threads=2)
    qps = len(q) / (time.perf_counter() - start)
    emit("build_toy_sets", n_sets)
    emit("build_toy_negatives_s", neg_s)
    emit("build_toy_sets_s", sets_s)
    emit("build_toy_total_s", neg_s + sets_s)
    emit("build_bm25_queries_per_s", qps)
    paper_instances = sum(1000 * 2**i for i in range(8)) * 9
    emit("build_paper_instances", paper_instances)
    # BM25 for 64k filler queries + leaks on MS MARCO docs is slower per query than the toy index;
    # the estimate scales the measured toy rates linearly (a lower bound).
    emit("build_paper_estimate_s", 66000 / qps + sets_s / instances * paper_instances)


def bench_rerank(root: Path) -> None:
    """Re-ranking throughput (docs/s) of each registered model on the toy world's BM25 top-100, on CPU."""
    from leakexp.config import compose, resolved_model_config
    from leakexp.models import REGISTRY
    from leakexp.pipeline import Pipeline
    from leakexp.rerank import rerank
    from leakexp.train import set_seed

    cfg = compose([f"store={root / 'rerank'}"])
    p = Pipeline(cfg)
    run = p.test_run("toy_robust")
    docs = p.collection("toy_robust").docs
    for name, cls in REGISTRY.items():
        from omegaconf import OmegaConf

        params = OmegaConf.to_container(resolved_model_config(cfg, name), resolve=True)
        batch = params.pop("train", {}).get("score_batch_size", 64)
        params.pop("name", None)
        set_seed(0)
        model = cls(**params)
        rerank(model, run.head(200), docs, batch_size=batch)  # warm-up
        start = time.perf_counter()
        rerank(model, run, docs, batch_size=batch)
        emit(f"rerank_{name}_docs_per_s_cpu", len(run) / (time.perf_counter() - start))


SECTIONS = {"detect": bench_detect, "build": bench_build, "rerank": bench_rerank}


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
