"""Where collections and training pools come from: the toy world, ir_datasets, or local files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig

from leakexp.data import toy
from leakexp.data.files import iter_docs, read_qrels, read_queries, read_trec_topics, read_variants
from leakexp.data.types import Collection, DictDocStore, Topic, TrainPool
from leakexp.store import Store, config_hash


class DataUnavailable(RuntimeError):
    """A data set that is not on this machine; the message says how to provide it."""


def file_fingerprint(*paths: Path) -> str:
    """Cheap identity of input files (size + mtime + name), for config hashes."""
    h = hashlib.sha256()
    for p in paths:
        st = Path(p).stat()
        h.update(f"{Path(p).name}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()[:16]


# -- the toy world -----------------------------------------------------------------------------------
def toy_config(data: DictConfig) -> dict:
    """What the toy world depends on (its artifact's config)."""
    return {
        "stage": "toy",
        "seed": int(data.seed),
        "queries_per_source": int(data.queries_per_source),
        "leak_fraction": float(data.leak_fraction),
        "generator": 4,
    }


def toy_world_path(store: Store, data: DictConfig) -> Path:
    return store.keyed("data", "toy", f"seed-{data.seed}", config=toy_config(data))


def toy_world(store: Store, data: DictConfig) -> Path:
    """Generate (once) the toy world for ``data`` into the store and return its directory."""
    config = toy_config(data)
    path = toy_world_path(store, data)

    def compute(tmp: Path) -> dict:
        return toy.generate(
            tmp,
            seed=int(data.seed),
            queries_per_source=int(data.queries_per_source),
            leak_fraction=float(data.leak_fraction),
        )["train"]

    return store.ensure(path, config, compute)


def load_local_collection(
    name: str, *, topics: Path, qrels: Path, docs: Path, variants: Path | None = None
) -> Collection:
    """A test collection from local files: TREC topics, TREC qrels, JSONL/TSV docs, variants TSV."""
    variant_map = read_variants(variants) if variants else {}
    parsed = {}
    for t in read_trec_topics(topics):
        parsed[t.qid] = Topic(t.qid, t.title, t.description, t.narrative, tuple(variant_map.get(t.qid, ())))
    return Collection(name, parsed, read_qrels(qrels), DictDocStore(dict(iter_docs(docs))))


def load_local_train_pool(
    *, msmarco: Path, orcas: Path, qrels: Path, docs: Path, name: str = "train"
) -> TrainPool:
    frames = []
    for source, path in (("msmarco", msmarco), ("orcas", orcas)):
        q = read_queries(path)
        q["source"] = source
        frames.append(q)
    queries = pd.concat(frames, ignore_index=True)
    dup = queries[queries.duplicated(["source", "qid"])]
    if len(dup):
        raise ValueError(f"duplicate training query ids within a source, e.g. {dup.iloc[0].qid!r}")
    tq = read_qrels(qrels)
    tq = tq[tq.label >= 1][["qid", "docno"]].reset_index(drop=True)
    return TrainPool(queries, tq, DictDocStore(dict(iter_docs(docs))), name=name)


# -- dispatch on config ------------------------------------------------------------------------------
def load_collection(store: Store, data: DictConfig, corpus: DictConfig) -> Collection:
    """The test collection a corpus config names."""
    if corpus.kind == "toy":
        if data.kind != "toy":
            raise ValueError(f"corpus={corpus.name} is a toy-world corpus but data={data.name}; use data=toy")
        d = toy_world(store, data) / corpus.collection
        return load_local_collection(
            corpus.name, topics=d / "topics.txt", qrels=d / "qrels.txt", docs=d / "docs.jsonl",
            variants=d / "variants.tsv",
        )
    if corpus.kind == "irds":
        from leakexp.data.irds import load_irds_collection

        return load_irds_collection(corpus.name, corpus.irds_id, variants=corpus.get("variants"))
    if corpus.kind == "local":
        return load_local_collection(
            corpus.name, topics=Path(corpus.topics), qrels=Path(corpus.qrels), docs=Path(corpus.docs),
            variants=Path(corpus.variants) if corpus.get("variants") else None,
        )
    raise ValueError(f"corpus.kind={corpus.kind!r} is unknown; use toy, irds or local")


def load_train_pool(store: Store, data: DictConfig) -> TrainPool:
    """The training pool a data config names."""
    if data.kind == "toy":
        d = toy_world(store, data) / "train"
        return load_local_train_pool(
            msmarco=d / "msmarco.queries.tsv", orcas=d / "orcas.queries.tsv", qrels=d / "qrels.txt",
            docs=d / "docs.jsonl", name=data.name,
        )
    if data.kind == "irds":
        from leakexp.data.irds import load_irds_train_pool

        return load_irds_train_pool(data.msmarco, data.orcas, name=data.name)
    if data.kind == "local":
        return load_local_train_pool(
            msmarco=Path(data.msmarco), orcas=Path(data.orcas), qrels=Path(data.qrels), docs=Path(data.docs),
            name=data.name,
        )
    raise ValueError(f"data.kind={data.kind!r} is unknown; use toy, irds or local")


def data_fingerprint(store: Store, data: DictConfig) -> str:
    """Identity of a training pool's inputs, for the config hashes of downstream stages."""
    if data.kind == "toy":
        return config_hash(toy_config(data))  # what the generator makes is fixed by its config
    if data.kind == "local":
        return file_fingerprint(Path(data.msmarco), Path(data.orcas), Path(data.qrels), Path(data.docs))
    return f"{data.kind}:{data.msmarco}:{data.orcas}"


def corpus_fingerprint(store: Store, data: DictConfig, corpus: DictConfig) -> str:
    if corpus.kind == "toy":
        return f"{data_fingerprint(store, data)}:{corpus.collection}"
    if corpus.kind == "local":
        paths = [Path(corpus.topics), Path(corpus.qrels), Path(corpus.docs)]
        if corpus.get("variants"):
            paths.append(Path(corpus.variants))
        return file_fingerprint(*paths)
    return f"irds:{corpus.irds_id}:{corpus.get('variants')}"
