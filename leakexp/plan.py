"""What a configured run will cost: job counts, instances, embedding sizes and time estimates.

The throughput figures come from ``plan:`` in the config. They are estimates (see the comments there),
not measurements; ``make bench`` measures this machine.
"""

from __future__ import annotations

from omegaconf import DictConfig

SBERT_DIM = {"bundled": 384, "sentence-transformers/paraphrase-MiniLM-L6-v2": 384}


def query_counts(cfg: DictConfig, pipeline=None) -> dict[str, int]:
    """Training queries per source, from the loaded pool (toy, local) or ir_datasets' metadata (irds)."""
    if cfg.data.kind == "irds":
        from leakexp.data.irds import load_dataset

        return {s: int(load_dataset(cfg.data[s]).queries_count()) for s in ("msmarco", "orcas")}
    pool = pipeline.pool
    return {s: int((pool.queries.source == s).sum()) for s in ("msmarco", "orcas")}


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def plan(cfg: DictConfig, pipeline=None) -> dict:
    p, g = cfg.plan, cfg.grid
    counts = query_counts(cfg, pipeline)
    dim = SBERT_DIM.get(str(cfg.detect.sbert), int(p.get("sbert_dim", 384)))
    n = sum(counts.values())
    embed_bytes = n * dim * 4
    sets = len(g.corpora) * len(g.leakages) * len(g.sizes)
    per_set_instances = sum(int(s) for s in g.sizes) * len(g.corpora) * len(g.leakages)
    models = list(g.models)
    seeds = len(g.seeds)
    train_hours, rerank_hours = {}, {}
    topics = {c: int(t) for c, t in p.topics.items()}
    for m in models:
        inst = per_set_instances * seeds
        train_hours[m] = inst / float(p.train_instances_per_s[m]) / 3600
        docs = sum(topics.get(c, 50) for c in g.corpora) * len(g.leakages) * len(g.sizes) * seeds * int(cfg.rerank.depth)
        rerank_hours[m] = docs / float(p.rerank_docs_per_s[m]) / 3600
    return {
        "queries": counts, "queries_total": n, "embedding_dim": dim,
        "embedding_bytes": embed_bytes, "embed_hours": n / float(p.embed_queries_per_s) / 3600,
        "jobs": {"training sets": sets, "train": sets * len(models) * seeds, "rerank": sets * len(models) * seeds,
                 "evaluate": sets * len(models) * seeds},
        "training_instances": per_set_instances * seeds * len(models),
        "train_gpu_hours": train_hours, "rerank_gpu_hours": rerank_hours,
        "gpu_hours_total": sum(train_hours.values()) + sum(rerank_hours.values()),
    }


def render(info: dict) -> str:
    lines = [
        "leakexp plan (estimates from the config's plan: throughput table, not measurements)",
        f"  training queries: {info['queries_total']:,} ({', '.join(f'{k} {v:,}' for k, v in info['queries'].items())})",
        f"  embeddings: {info['embedding_dim']}-d float32 = {human_bytes(info['embedding_bytes'])} on disk "
        f"(memory-mapped; exact search holds one shard in memory); ~{info['embed_hours']:.2f} h to embed",
        "  jobs: " + ", ".join(f"{k} {v:,}" for k, v in info["jobs"].items()),
        f"  training instances over all jobs: {info['training_instances']:,}",
    ]
    for m in info["train_gpu_hours"]:
        lines.append(f"  {m:<9} train ~{info['train_gpu_hours'][m]:8.1f} GPU-h   re-rank ~{info['rerank_gpu_hours'][m]:7.1f} GPU-h")
    lines.append(f"  total ~{info['gpu_hours_total']:.0f} GPU-hours")
    return "\n".join(lines)
