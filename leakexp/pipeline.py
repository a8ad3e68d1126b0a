"""The pipeline: each stage a cached artifact in the store, computed once from its config.

Stages, in data-flow order: data (toy world) -> index (PISA) -> detect (SBERT + Faiss) -> verify
(annotations) -> negatives (BM25 of training queries) -> set (training set) -> train -> rerank -> eval.
Each stage's config hash includes the hashes of the artifacts it reads, so a changed value redoes that
stage and those below it, and nothing else.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from leakexp import build as builder
from leakexp import detect as detector
from leakexp import verify as verifier
from leakexp.config import corpus_config, resolved_model_config
from leakexp.data import sources
from leakexp.data.types import Collection, TrainPool
from leakexp.evaluate import per_query
from leakexp.models import get as get_model_class
from leakexp.models import load_checkpoint
from leakexp.rerank import rerank, write_trec_run
from leakexp.retrieval import bm25_run, build_index
from leakexp.store import Store, atomic_write_json, config_hash
from leakexp.train import TrainConfig, resolve_device, set_seed, train

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cell:
    """One grid cell: a training set (corpus, leakage, size) and a model trained on it with a seed."""

    corpus: str
    leakage: str
    size: int
    model: str
    seed: int

    @property
    def set_key(self) -> tuple:
        return (self.corpus, self.leakage, self.size)

    def parts(self) -> list[str]:
        return [self.corpus, self.leakage, str(self.size), self.model, f"seed-{self.seed}"]

    def __str__(self) -> str:
        return f"{self.corpus}/{self.leakage}/{self.size}/{self.model}/seed-{self.seed}"


def cell_from_config(cfg: DictConfig) -> Cell:
    return Cell(cfg.corpus.name, cfg.leakage.name, int(cfg.size), cfg.model.name, int(cfg.seed))


def grid_cells(cfg: DictConfig) -> list[Cell]:
    g = cfg.grid
    return [Cell(c, l, int(s), m, int(seed)) for c in g.corpora for l in g.leakages for s in g.sizes
            for m in g.models for seed in g.seeds]


class Pipeline:
    """Runs stages for one config; loaded data and models are shared by all cells of one process."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.store = Store(cfg.store)
        self.device = resolve_device(cfg.get("device", "auto"))
        self.verbose = bool(cfg.get("verbose", False))
        self._collections: dict[str, Collection] = {}
        self._memo: dict[str, object] = {}

    # -- configs --------------------------------------------------------------------------------------
    def corpus_cfg(self, name: str) -> DictConfig:
        return self.cfg.corpus if name == self.cfg.corpus.name else corpus_config(name)

    def model_cfg(self, name: str) -> DictConfig:
        return resolved_model_config(self.cfg, name)

    @property
    def corpora(self) -> list[str]:
        return list(self.cfg.data.corpora)

    # -- data -----------------------------------------------------------------------------------------
    @cached_property
    def pool(self) -> TrainPool:
        return sources.load_train_pool(self.store, self.cfg.data)

    @cached_property
    def pool_fingerprint(self) -> str:
        return sources.data_fingerprint(self.store, self.cfg.data)

    def collection(self, name: str) -> Collection:
        if name not in self._collections:
            self._collections[name] = sources.load_collection(self.store, self.cfg.data, self.corpus_cfg(name))
        return self._collections[name]

    def corpus_fingerprint(self, name: str) -> str:
        return sources.corpus_fingerprint(self.store, self.cfg.data, self.corpus_cfg(name))

    # -- BM25 -----------------------------------------------------------------------------------------
    def _bm25_kwargs(self) -> dict:
        b = self.cfg.bm25
        return dict(k1=float(b.k1), b=float(b.b), threads=int(b.threads), verbose=self.verbose)

    def index(self, name: str) -> Path:
        """PISA index of a test collection (``name`` = corpus) or of the training pool (``train``)."""
        if name == "train":
            return build_index(self.store, f"train-{self.pool.name}", iter(self.pool.docs),
                               fingerprint=self.pool_fingerprint, **self._bm25_kwargs())
        c = self.collection(name)
        return build_index(self.store, name, iter(c.docs), fingerprint=self.corpus_fingerprint(name),
                           **self._bm25_kwargs())

    def test_run(self, corpus: str) -> pd.DataFrame:
        """BM25 top-k of every topic of ``corpus`` (the query field from ``rerank.query_field``)."""
        field = self.cfg.rerank.query_field
        topics = self.collection(corpus).topics_frame(field)
        return bm25_run(self.store, self.index(corpus), f"{corpus}/{field}", topics,
                        depth=int(self.cfg.rerank.depth), **self._bm25_kwargs())

    # -- detection and verification --------------------------------------------------------------------
    def candidates(self) -> pd.DataFrame:
        if "candidates" not in self._memo:
            d = self.cfg.detect
            fields = list(d.fields)
            for c in self.corpora:  # before loading anything: variants that are missing by accident
                sources.require_variants(self.corpus_cfg(c), fields)
            collections = [self.collection(c) for c in self.corpora]
            for c, coll in zip(self.corpora, collections):
                sources.check_variants(coll, self.corpus_cfg(c), fields)
            self._memo["candidates"] = detector.detect(
                self.store, self.pool, collections, sbert=d.sbert, k=int(d.k),
                fields=fields, batch_size=int(d.batch_size), fingerprint=self.pool_fingerprint,
            )
        return self._memo["candidates"]

    def _detect_hash(self) -> str:
        slug = Path(self.cfg.detect.sbert).name if self.cfg.detect.sbert != "bundled" else "all-MiniLM-L6-v2"
        marker = self.store.marker(self.store.path("detect", self.cfg.data.name, slug))
        return marker.config_hash if marker else ""

    def excluded(self) -> set[tuple[str, str]]:
        """(source, qid) of every training query that No-Leakage sets must not use: above the threshold for any
        topic of any corpus, annotated (whatever its recomputed similarity), or a verified leak."""
        pairs = detector.above_threshold(self.candidates(), float(self.cfg.detect.threshold))
        leaks = [self.verified_leaks(c) for c in self.corpora]
        return builder.excluded_queries(self.pool, pairs, self.annotations(), leaks)

    def _annotation_files(self) -> list[Path]:
        spec = self.cfg.verify.annotations
        if spec == "truth":
            if self.cfg.data.kind != "toy":
                raise ValueError("verify.annotations=truth needs the toy world (data=toy); give annotation files")
            return []
        if OmegaConf.is_missing(self.cfg.verify, "annotations"):
            raise ValueError("verify.annotations is not set: give the annotation files, e.g. "
                             "verify.annotations=[a.jsonl,b.jsonl] (see `leakexp annotations review`)")
        return [Path(p) for p in (spec if OmegaConf.is_list(spec) else [spec])]

    def verify_config(self) -> dict:
        v = self.cfg.verify
        files = self._annotation_files()
        return {
            "stage": "verify", "detect": self._detect_hash(), "threshold": float(self.cfg.detect.threshold),
            "top_k": int(v.review_top_k), "corpora": self.corpora,
            "annotations": "truth" if not files else sources.file_fingerprint(*files),
        }

    def verify_path(self) -> Path:
        """Where the verify artifact of this config lives (cheap: loads no data)."""
        return self.store.path("verify", self.cfg.data.name, config_hash(self.verify_config()))

    def annotations(self) -> pd.DataFrame:
        """Verified candidates of all corpora (the verify artifact), from files or the toy ground truth."""
        if "annotations" in self._memo:
            return self._memo["annotations"]
        cands = self.candidates()
        config = self.verify_config()  # after candidates(): the detect hash is known now
        files = self._annotation_files()
        threshold, top_k = float(self.cfg.detect.threshold), int(self.cfg.verify.review_top_k)
        path = self.store.path("verify", self.cfg.data.name, config_hash(config))
        collections = [self.collection(c) for c in self.corpora]

        def compute(tmp: Path) -> dict:
            review = verifier.review_candidates(detector.leak_pairs(cands, threshold), top_k)
            if not files:
                truth = pd.read_csv(sources.toy_world(self.store, self.cfg.data) / "truth" / "leaks.tsv", sep="\t",
                                    dtype=str)
                labels = verifier.truth_labels(review, truth)
                records = verifier.to_annotation_records(review, collections, labels)
                verifier.write_annotations(tmp / "annotations.jsonl", records)
                ann = verifier.read_annotations([tmp / "annotations.jsonl"])
            else:
                verifier.write_annotations(tmp / "review.jsonl", verifier.to_annotation_records(review, collections))
                ann = verifier.read_annotations(files)
            ann.assign(labels=ann.labels.map(lambda x: "|".join(x))).to_parquet(tmp / "annotations.parquet",
                                                                                 index=False)
            leaking = {c.name: sorted(verifier.verified_leaks(ann, list(c.topics)).topic_qid.unique())
                       for c in collections}
            atomic_write_json(tmp / "leaking_topics.json", leaking)
            return {"reviewed": len(review), "annotated": len(ann), "true": int(ann.leak.sum())}

        self.store.ensure(path, config, compute)
        ann = pd.read_parquet(path / "annotations.parquet")
        ann["labels"] = ann.labels.str.split("|")
        self._memo["annotations"] = ann
        return ann

    def detection_quality(self) -> dict:
        """Toy world only: candidates above the threshold against the planted leaks."""
        truth = pd.read_csv(sources.toy_world(self.store, self.cfg.data) / "truth" / "leaks.tsv", sep="\t", dtype=str)
        pairs = detector.leak_pairs(self.candidates(), float(self.cfg.detect.threshold))
        return verifier.detection_quality(pairs, truth)

    def verified_leaks(self, corpus: str) -> pd.DataFrame:
        """Verified leaking training queries of one corpus, with their text and source."""
        key = f"leaks:{corpus}"
        if key not in self._memo:
            self._memo[key] = self._verified_leaks(corpus)
        return self._memo[key]

    def _verified_leaks(self, corpus: str) -> pd.DataFrame:
        pairs = detector.leak_pairs(self.candidates(), float(self.cfg.detect.threshold))
        leaks = verifier.verified_leaks(self.annotations(), list(self.collection(corpus).topics), corpus=corpus,
                                        pairs=pairs)
        return builder.leaking_queries(self.pool, leaks)

    # -- training sets ---------------------------------------------------------------------------------
    def negatives(self) -> builder.Negatives:
        """BM25 top-k of every training query that any configured set can use, computed once, shared."""
        seed = int(self.cfg.build.seed)
        fillers = self.fillers()
        max_size = max(int(s) for s in self.cfg.grid.sizes) if self.cfg.get("grid") else int(self.cfg.size)
        max_size = max(max_size, int(self.cfg.size))
        need = min(len(fillers), int(max_size // 2 * 1.1) + 100)  # slack for queries without a negative
        leaks = pd.concat([self.verified_leaks(c) for c in self.corpora], ignore_index=True)
        queries = pd.concat([fillers.iloc[:need], leaks[["qid", "text", "source"]]], ignore_index=True)
        queries = queries.drop_duplicates(["source", "qid"])
        # one BM25 query id per training query: an id may name an MS MARCO and an ORCAS query
        queries = pd.DataFrame({"qid": [builder.query_key(s, q) for s, q in zip(queries.source, queries.qid)],
                                "query": queries.text})
        queries = queries.sort_values("qid", kind="mergesort").reset_index(drop=True)
        run = bm25_run(self.store, self.index("train"), f"train-{self.pool.name}/{config_hash(list(queries.qid))}",
                       queries, depth=int(self.cfg.build.negatives_depth), **self._bm25_kwargs())
        source, qid = builder.split_query_key(run.qid)
        return builder.Negatives.from_frames(self.pool.qrels, run.assign(source=source, qid=qid), seed)

    @cached_property
    def _fillers(self) -> pd.DataFrame:
        return builder.filler_order(self.pool, self.excluded(), int(self.cfg.build.seed))

    def fillers(self) -> pd.DataFrame:
        return self._fillers

    def set_config(self, corpus: str, leakage: str, size: int) -> dict:
        """What a training set depends on; cheap (reads markers, loads no data)."""
        c, b = self.corpus_cfg(corpus), self.cfg.build
        missing = b.get("test_missing_judgments", "skip")
        if missing not in builder.MISSING_JUDGMENTS:
            from leakexp.config import ConfigError

            raise ConfigError(f"build.test_missing_judgments={missing!r} is unknown; use skip or top_up")
        return {
            "stage": "set", "corpus": corpus, "leakage": leakage, "size": int(size),
            "pool": self.pool_fingerprint, "collection": self.corpus_fingerprint(corpus),
            "detect": self._detect_hash(), "threshold": float(self.cfg.detect.threshold),
            "verify": config_hash(self.verify_config()), "seed": int(b.seed), "negatives_depth": int(b.negatives_depth),
            "fixed": int(c.fixed_leak_queries if leakage == "msm" else c.test_leak_queries if leakage == "test" else 0),
            "test_field": b.test_query_field, "take_all_leaks": bool(b.take_all_leaks),
            "test_with_replacement": bool(b.test_with_replacement), "test_missing_judgments": missing,
            "bm25": {"k1": float(self.cfg.bm25.k1), "b": float(self.cfg.bm25.b)},
        }

    def training_set(self, corpus: str, leakage: str, size: int) -> Path:
        """The training set artifact ``sets/<corpus>/<leakage>/<size>``."""
        config = self.set_config(corpus, leakage, size)
        path = self.store.path("sets", corpus, leakage, size)
        if not self.store.is_done(path, config):
            self.annotations()  # detection and verification first; their hashes enter the set's config
            config = self.set_config(corpus, leakage, size)

        def compute(tmp: Path) -> dict:
            b = self.cfg.build
            frame, manifest = builder.build_set(
                corpus=corpus, leakage=leakage, size=int(size), fixed_queries=config["fixed"],
                fillers=self.fillers(), negatives=self.negatives(),
                leaks=self.verified_leaks(corpus) if leakage == "msm" else None,
                collection=self.collection(corpus), pool_docs=self.pool.docs, seed=int(b.seed),
                test_field=b.test_query_field, take_all_leaks=bool(b.take_all_leaks),
                test_with_replacement=bool(b.test_with_replacement),
                test_missing_judgments=config["test_missing_judgments"],
            )
            builder.write_set(tmp, frame, manifest)
            if manifest.get("skipped_topics"):
                log.info("%s/%s/%s: %d topic(s) without judgments skipped (%s); leaked part %d instances short",
                         corpus, leakage, size, len(manifest["skipped_topics"]),
                         ", ".join(f"{t['topic']}: {t['reason']}" for t in manifest["skipped_topics"]),
                         manifest["leaked_shortfall"])
            return {k: manifest[k] for k in ("instances", "leaked_instances", "leaked_shortfall", "leakage_ratio",
                                             "content_hash")}

        return self.store.ensure(path, config, compute)

    # -- train, rerank, evaluate ----------------------------------------------------------------------
    def embedded_t5(self) -> Path:
        """The embedded monoT5's tokenizer + config, with a vocabulary trained on the toy world's text."""
        if self.cfg.data.kind != "toy":
            raise ValueError("model.checkpoint=embedded (monoT5) needs the toy world; use checkpoint=t5-base")
        from leakexp.models.monot5 import train_embedded_tokenizer

        config = {"stage": "embedded-t5", "data": self.pool_fingerprint, "vocab_size": 4000}
        path = self.store.path("models", "monot5-embedded", self.cfg.data.name)

        def compute(tmp: Path) -> dict:
            texts = [t for _, t in self.pool.docs] + self.pool.queries.text.tolist()
            for c in self.corpora:
                coll = self.collection(c)
                texts += [t for _, t in coll.docs] + [t.title for t in coll.topics.values()]
            train_embedded_tokenizer(texts, tmp / "t5", vocab_size=4000)
            return {"texts": len(texts)}

        return self.store.ensure(path, config, compute) / "t5"

    def _model_params(self, name: str) -> tuple[dict, TrainConfig]:
        m = OmegaConf.to_container(self.model_cfg(name), resolve=True)
        train_cfg = m.pop("train", {}) or {}
        m.pop("name", None)
        if name == "monot5" and m.get("checkpoint") == "embedded":
            m["checkpoint"] = str(self.embedded_t5())
        known = TrainConfig.__dataclass_fields__
        return m, TrainConfig(**{k: v for k, v in train_cfg.items() if k in known})

    def train_config(self, cell: Cell) -> dict:
        set_path = self.training_set(cell.corpus, cell.leakage, cell.size)
        params = OmegaConf.to_container(self.model_cfg(cell.model), resolve=True)
        params.get("train", {}).pop("score_batch_size", None)  # inference batching does not change the model
        return {"stage": "train", "set": self.store.marker(set_path).figures["content_hash"], "model": cell.model,
                "params": params, "seed": cell.seed,
                "device": "cuda" if self.device.startswith("cuda") else "cpu"}

    def trained(self, cell: Cell) -> Path:
        config = self.train_config(cell)
        path = self.store.path("train", *cell.parts())

        def compute(tmp: Path) -> dict:
            instances = pd.read_parquet(self.store.path("sets", *cell.set_key) / "instances.parquet")
            params, tcfg = self._model_params(cell.model)
            set_seed(cell.seed)  # the seed also fixes the random initialisation
            model = get_model_class(cell.model)(**params)
            figures = train(model, instances, seed=cell.seed, cfg=tcfg, device=self.device, progress=self.verbose or None)
            model.save(tmp)
            atomic_write_json(tmp / "manifest.json", {"cell": str(cell), "seed": cell.seed, **figures})
            return {k: figures[k] for k in ("instances", "steps", "final_loss", "seconds")}

        return self.store.ensure(path, config, compute)

    def reranked(self, cell: Cell) -> Path:
        model_path = self.trained(cell)
        run = self.test_run(cell.corpus)
        config = {"stage": "rerank", "train": self.store.marker(model_path).config_hash,
                  "bm25": config_hash(run[["qid", "docno"]].values.tolist()), "field": self.cfg.rerank.query_field,
                  "depth": int(self.cfg.rerank.depth)}
        path = self.store.path("rerank", *cell.parts())

        def compute(tmp: Path) -> dict:
            model = load_checkpoint(model_path).to(self.device)
            batch = int(self.model_cfg(cell.model).get("train", {}).get("score_batch_size", 64))
            res = rerank(model, run, self.collection(cell.corpus).docs, batch_size=batch, device=self.device)
            res.to_parquet(tmp / "run.parquet", index=False)
            write_trec_run(res, tmp / "run.trec.gz", f"leakexp-{cell.model}-{cell.leakage}-{cell.size}-s{cell.seed}")
            return {"queries": int(res.qid.nunique()), "rows": len(res)}

        return self.store.ensure(path, config, compute)

    def evaluated(self, cell: Cell) -> pd.DataFrame:
        run_path = self.reranked(cell)
        e = self.cfg.evaluate
        config = {"stage": "eval", "rerank": self.store.marker(run_path).config_hash, "measures": list(e.measures),
                  "mfr_missing": e.mfr_missing, "qrels": self.corpus_fingerprint(cell.corpus)}
        path = self.store.path("eval", *cell.parts())

        def compute(tmp: Path) -> dict:
            run = pd.read_parquet(run_path / "run.parquet")
            pq = per_query(run, self.collection(cell.corpus).qrels, list(e.measures), mfr_missing=e.mfr_missing,
                           depth=int(self.cfg.rerank.depth))
            pq.to_parquet(tmp / "perquery.parquet", index=False)
            return {m: round(float(v), 6) for m, v in pq.groupby("measure").value.mean().items()}

        self.store.ensure(path, config, compute)
        out = pd.read_parquet(path / "perquery.parquet")
        return out.assign(corpus=cell.corpus, leakage=cell.leakage, size=cell.size, model=cell.model, seed=cell.seed)

    def run_cell(self, cell: Cell) -> dict:
        """Everything one cell needs, computing only what the store lacks; returns its mean measures."""
        pq = self.evaluated(cell)
        return pq.groupby("measure").value.mean().to_dict()


def stored_results(store: Store, cells: list[Cell]) -> pd.DataFrame:
    """Per-query values of the finished cells among ``cells``, read from the store alone."""
    frames = []
    for cell in cells:
        path = store.path("eval", *cell.parts())
        if store.marker(path) is None:
            continue
        pq = pd.read_parquet(path / "perquery.parquet")
        frames.append(pq.assign(corpus=cell.corpus, leakage=cell.leakage, size=cell.size, model=cell.model,
                                seed=cell.seed))
    if not frames:
        return pd.DataFrame(columns=["qid", "measure", "value", "corpus", "leakage", "size", "model", "seed"])
    return pd.concat(frames, ignore_index=True)
