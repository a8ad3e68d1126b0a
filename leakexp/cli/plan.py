"""What a configured run will cost: job counts, instances, embedding sizes and time estimates.

Throughput per model comes from the GPU benchmark's file when one exists (``make bench`` on a GPU machine writes
``<store>/bench/gpu.json``: measured), otherwise from ``plan:`` in the config (assumed; see the comments there).
Training instances per cell follow the budget: ``train.epochs`` x size, or ``train.updates`` x pairs per update x 2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from leakexp.stages.robustness import family as rb
from leakexp.lib import hub
from leakexp.runner.schema import Settings
from leakexp.runner.stage import Ask
from leakexp.stages.cell import grid_cells, rerank_params
from leakexp.stages.build import NEGATIVES_CHUNK
from leakexp.stages.sources import pool_source
from leakexp.lib.trainer import Training

SBERT_DIM = {"bundled": 384, "sentence-transformers/paraphrase-MiniLM-L6-v2": 384}
BENCH_FILE = Path("bench") / "gpu.json"  # under the store root; written by `benchmarks/run.py gpu`


def bench_path(s: Settings) -> Path:
    return Path(s.run.store) / BENCH_FILE


def load_measured(path: str | Path) -> dict | None:
    """The GPU benchmark's figures: {"device", "train_instances_per_s": {model: x}, "rerank_docs_per_s": {...},
    "startup_s", "compile_s"} (monoT5's and monoBERT's figures are those of the path experiment=paper takes on CUDA,
    their ``fast`` rows), or None when there is no file. A file without those figures is an error that names it."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        models = data["models"]
        out = {"device": str(data["device"]), "path": str(path),
               "train_instances_per_s": {m: float(v["train_instances_per_s"]) for m, v in models.items()},
               "rerank_docs_per_s": {m: float(v["rerank_docs_per_s"]) for m, v in models.items()},
               "startup_s": {m: float(v["startup_s"]) for m, v in models.items() if "startup_s" in v},
               "compile_s": {m: float(v["compile_s"]) for m, v in models.items() if "compile_s" in v}}
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a leakexp GPU benchmark file ({type(exc).__name__}: {exc}); rerun "
                         "`python benchmarks/run.py gpu` or delete the file to use the assumed figures") from None
    for kind in ("train_instances_per_s", "rerank_docs_per_s"):
        for m, v in out[kind].items():
            if not v > 0:
                raise ValueError(f"{path}: models.{m}.{kind}={v} must be > 0")
    return out


def query_counts(runner) -> dict[str, int]:
    """Training queries per source, from the data's metadata where its source has it (ir_datasets), else from the
    loaded pool (the toy world, local files)."""
    data = runner.settings.data.model_dump()
    counts = pool_source(data).query_counts(data)
    if counts is not None:
        return counts
    pool = runner.get(Ask.of("pool"))
    return {s: int((pool.queries.source == s).sum()) for s in ("msmarco", "orcas")}


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def trained_instances(s: Settings, model: str, size: int) -> int:
    """Instances one cell trains on under the configured budget (each pair is two instances): the model's ``train:``
    block and the ``train`` budget, passed on whole as the train stage passes them."""
    t = Training.of(s.values["models"][model].get("train") or {}, s.values.get("train") or {})
    if t.updates is not None:
        return 2 * t.updates * t.batch_size * t.grad_accum
    return t.epochs * size


def distinct_jobs(runner) -> dict[str, tuple[int, list]]:
    """Per stage of the grid's cells: (requests, the distinct artifacts they name after sharing: the No-Leakage
    sets and models are one for every corpus). Computes nothing and needs no data."""
    cells = grid_cells(runner.settings)
    out = {}
    for stage, label in (("build", "training sets"), ("train", "train"), ("rerank", "rerank"), ("evaluate", "evaluate")):
        asks = [c.ask(stage) for c in cells]
        out[label] = (len(set(asks)), list(dict.fromkeys(runner.normal(a) for a in asks)))
    # each document a model reads, encoded once per (model, training set) and (model, first-stage run)
    tokens = [runner.normal(a) for label in ("train", "rerank") for a in out[label][1]
              for a in [runner.inputs(a)["tokens"]]]
    out["tokens"] = (len(tokens), list(dict.fromkeys(tokens)))
    return out


def robustness_jobs(runner, grid_reranks: list, topics: dict[str, int]) -> dict:
    """The robustness stage's work when ``robustness.enabled``: distinct artifacts per robustness stage (after
    sharing), and per model the documents it scores beyond the grid's re-rankings: OOD re-rankings the grid
    lacks (a No-Leakage model's re-ranking of another grid corpus is the grid's own run: not counted), each query
    attack's re-ranking of every topic's candidates (an upper bound: topics an attack cannot change are not
    re-scored), and the manipulated documents re-scored before and after (stuff: one per topic; noise: the pool)."""
    s = runner.settings
    depth = s.rerank.depth
    grid = set(grid_reranks)
    jobs: dict[str, set] = {}
    docs: dict[str, int] = {}
    ood_reranks = set()
    for cell in rb.robustness_cells(s):
        for name, ask in rb.parts(s, cell).items():
            normal = runner.normal(ask)
            jobs.setdefault(ask.stage, set()).add(normal)
            n = topics.get(ask.params.get("target", cell.corpus), 50)
            if ask.stage == rb.OOD:
                ood_reranks.add(runner.normal(Ask.of("rerank", **rerank_params(ask.params))))
            elif ask.stage == rb.QUERY:
                docs[cell.model] = docs.get(cell.model, 0) + n * depth
            elif ask.stage == rb.DOC:
                docs[cell.model] = docs.get(cell.model, 0) + 2 * n * (1 if ask.params["kind"] == "stuff" else depth)
    for r in ood_reranks - grid:
        docs[r.params["model"]] = docs.get(r.params["model"], 0) + topics.get(r.params["target"], 50) * depth
    counts = {k: len(v) for k, v in jobs.items()}
    counts["extra OOD re-rankings"] = len(ood_reranks - grid)
    return {"jobs": counts, "docs": docs, "shared_ood_reranks": len(ood_reranks & grid)}


def cpu_jobs(runner, jobs: dict) -> dict:
    """CPU work that grows with the real data, in one-core hours: pairing training queries with negatives (every
    distinct training set pairs the queries of the negatives chunks it reads: ``NEGATIVES_CHUNK`` per chunk) at
    ``plan.negatives_queries_per_s``, and each distinct df table (the training collection's, each ranked corpus's:
    KNRM / PACRR / Duet) at ``plan.df_words_per_s``, sized by ``plan.collections`` (documents x words per
    document); a table without a size there is listed as unknown."""
    p = runner.settings.plan
    queries = sum(NEGATIVES_CHUNK * sum(1 for n in runner.inputs(a).get("negatives", []) if n.params["part"] != "leaks")
                  for a in jobs["training sets"][1])
    tables = {}
    for a in jobs["train"][1] + jobs["rerank"][1]:
        df = runner.inputs(a).get("df")
        if df is not None:
            tables.setdefault(str(df.params["name"]), runner.normal(df))
    df_hours, unknown = {}, []
    for name in tables:
        if name in p.collections:
            size = p.collections[name]
            df_hours[name] = size.docs * size.words_per_doc / p.df_words_per_s / 3600
        else:
            unknown.append(name)
    return {"negatives_queries": queries,
            "negatives_cpu_hours": queries / p.negatives_queries_per_s / 3600,
            "df_cpu_hours": df_hours, "df_unknown": unknown}


def plan(s: Settings, runner, bench: str | Path | None = None) -> dict:
    """Job counts (after sharing) and hours. ``bench`` (default ``<store>/bench/gpu.json``): measured throughput,
    when present."""
    p, g = s.plan, s.grid
    counts = query_counts(runner)
    jobs = distinct_jobs(runner)
    dim = SBERT_DIM.get(hub.parse(s.detect.sbert)[0], 384)  # NAME of NAME@COMMIT
    n = sum(counts.values())
    embed_bytes = n * dim * 4
    models = list(g.models)
    measured = load_measured(bench if bench is not None else bench_path(s))
    topics = dict(p.topics)
    train_hours, rerank_hours, source, instances, overhead_hours, encode_hours, feed = {}, {}, {}, {}, {}, {}, {}
    for m in models:
        have = measured is not None and m in measured["train_instances_per_s"]
        assumed = s.plan_of(m)  # the model file's plan: block
        train_rate = measured["train_instances_per_s"][m] if have else assumed.train_instances_per_s
        rerank_rate = measured["rerank_docs_per_s"][m] if have else assumed.rerank_docs_per_s
        source[m] = f"measured ({measured['device']})" if have else "assumed"
        per_size: dict[int, int] = {}  # one model config resolved per size, not per training job
        for a in jobs["train"][1]:
            if a.params["model"] == m:
                size = int(a.params["size"])
                if size not in per_size:
                    per_size[size] = trained_instances(s, m, size)
                instances[m] = instances.get(m, 0) + per_size[size]
        instances.setdefault(m, 0)
        train_hours[m] = instances[m] / train_rate / 3600
        docs = sum(topics.get(a.params["target"], 50) for a in jobs["rerank"][1] if a.params["model"] == m) * \
            s.rerank.depth
        rerank_hours[m] = docs / rerank_rate / 3600
        # every job is a process that imports and loads its word vectors before its first step; the gpu_local,
        # gpu_slurm and cpu_slurm launchers run plan.cells_per_job cells per process (hydra.launcher.cells_per_job)
        startup = (measured or {}).get("startup_s", {}).get(m, assumed.job_startup_s)
        if s.precision.train_compile or s.precision.rerank_compile:  # each process compiles its graphs (cold: at most)
            startup += (measured or {}).get("compile_s", {}).get(m, 0.0)
        processes = math.ceil(sum(1 for a in jobs["train"][1] if a.params["model"] == m) / p.cells_per_job)
        overhead_hours[m] = processes * startup / 3600
        # CPU: encoding each document once (a set of `size` instances holds at most `size` documents), and whether
        # the loader's workers collate faster than the GPU trains
        docs_encoded = sum(int(a.params["size"]) if a.params["docs"] == "set" else
                           topics.get(a.params["corpus"], 50) * s.rerank.depth
                           for a in jobs["tokens"][1] if a.params["model"] == m)
        encode_hours[m] = docs_encoded / assumed.encode_docs_per_s / 3600
        per_core = assumed.data_pipeline_instances_per_s
        feed[m] = {"cpu_instances_per_s": per_core * max(1, p.loader_workers),
                   "gpu_instances_per_s": train_rate}
    robust = None
    if s.robustness.enabled:
        robust = robustness_jobs(runner, jobs["rerank"][1], topics)
        rates = {m: (measured["rerank_docs_per_s"][m] if measured is not None and m in measured["rerank_docs_per_s"]
                     else s.plan_of(m).rerank_docs_per_s) for m in robust["docs"]}
        robust["gpu_hours"] = {m: d / rates[m] / 3600 for m, d in robust["docs"].items()}
    return {
        "cpu": cpu_jobs(runner, jobs),
        "robustness": robust,
        "queries": counts, "queries_total": n, "embedding_dim": dim,
        "embedding_bytes": embed_bytes, "embed_hours": n / p.embed_queries_per_s / 3600,
        "jobs": {k: len(v[1]) for k, v in jobs.items()}, "jobs_before_sharing": {k: v[0] for k, v in jobs.items()},
        "training_instances": sum(instances.values()), "training_instances_per_model": instances,
        "train_gpu_hours": train_hours, "rerank_gpu_hours": rerank_hours, "throughput_source": source,
        "startup_hours": overhead_hours, "encode_cpu_hours": encode_hours, "data_pipeline": feed,
        "bench_file": measured["path"] if measured else None,
        "gpu_hours_total": sum(train_hours.values()) + sum(rerank_hours.values()) + sum(overhead_hours.values())
        + (sum(robust["gpu_hours"].values()) if robust else 0.0),
    }


def render_plan(info: dict) -> str:
    head = (f"leakexp plan (throughput measured by the GPU benchmark where marked: {info['bench_file']})"
            if info.get("bench_file") else
            "leakexp plan (throughput from the config's plan: table, measured on one H100, not on your machine; "
            "`python benchmarks/run.py gpu` on your GPU machine measures it there)")
    lines = [
        head,
        f"  training queries: {info['queries_total']:,} ({', '.join(f'{k} {v:,}' for k, v in info['queries'].items())})",
        f"  embeddings: {info['embedding_dim']}-d float32 = {human_bytes(info['embedding_bytes'])} on disk "
        f"(memory-mapped; exact search holds one shard in memory); ~{info['embed_hours']:.2f} h to embed",
        "  jobs: " + ", ".join(f"{k} {v:,}" for k, v in info["jobs"].items())
        + " (cells asking: " + ", ".join(f"{k} {v:,}" for k, v in info["jobs_before_sharing"].items())
        + "; equal work is done once)",
        f"  training instances over all jobs: {info['training_instances']:,}",
    ]
    for m in info["train_gpu_hours"]:
        lines.append(f"  {m:<9} train ~{info['train_gpu_hours'][m]:8.1f} GPU-h   re-rank ~{info['rerank_gpu_hours'][m]:7.1f} "
                     f"GPU-h   job start-up ~{info['startup_hours'].get(m, 0.0):5.1f} h   ({info['throughput_source'][m]})")
    if info.get("encode_cpu_hours"):
        lines.append("  encoding documents once (CPU, one core; the models' plan.encode_docs_per_s): " + ", ".join(
            f"{m} ~{h:.1f} h" for m, h in info["encode_cpu_hours"].items()))
    cpu = info.get("cpu")
    if cpu:
        lines.append(f"  negatives (CPU, one core; plan.negatives_queries_per_s): {cpu['negatives_queries']:,} training "
                     f"queries paired over all sets ~{cpu['negatives_cpu_hours']:.2f} h")
        if cpu["df_cpu_hours"] or cpu["df_unknown"]:
            lines.append("  df tables (CPU, one core; plan.df_words_per_s, sizes plan.collections; bm25.threads "
                         "processes share it): " + ", ".join(
                             [f"{n} ~{h:.2f} h" for n, h in cpu["df_cpu_hours"].items()]
                             + [f"{n} size unknown" for n in cpu["df_unknown"]]))
    slow = [f"{m} ({f['cpu_instances_per_s']:,.0f} < {f['gpu_instances_per_s']:,.0f} instances/s)"
            for m, f in info.get("data_pipeline", {}).items() if 0 < f["cpu_instances_per_s"] < f["gpu_instances_per_s"]]
    if slow:
        lines.append("  the data pipeline would keep the GPU waiting for: " + ", ".join(slow)
                     + "; raise loader_workers (plan.loader_workers)")
    r = info.get("robustness")
    if r:
        lines.append("  robustness (robustness.enabled): " + ", ".join(f"{k.removeprefix('robustness/')} {v:,}"
                                                                       for k, v in r["jobs"].items())
                     + f" ({r['shared_ood_reranks']:,} OOD re-rankings shared with the grid)")
        for m, h in r["gpu_hours"].items():
            lines.append(f"  {m:<9} robustness re-scoring ~{h:7.1f} GPU-h ({r['docs'][m]:,} documents)")
    lines.append(f"  total ~{info['gpu_hours_total']:.0f} GPU-hours")
    return "\n".join(lines)
