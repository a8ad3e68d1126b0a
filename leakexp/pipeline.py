"""The pipeline: each stage a cached artifact in the store, computed once from its config.

Stages, in data-flow order: data (toy world) -> index (PISA) -> detect (SBERT + Faiss) -> verify
(annotations) -> negatives (BM25 of training queries) -> set (training set) -> train -> rerank -> eval.
Each stage's config hash includes the hashes of the artifacts it reads, so a changed value redoes that
stage and those below it, and nothing else.
"""

from __future__ import annotations

import json
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
from leakexp.evaluate import per_query, without_relevant
from leakexp.models import get as get_model_class
from leakexp.models import load_checkpoint
from leakexp.rerank import rerank, write_trec_run
from leakexp.retrieval import bm25_run, build_index, read_trec_run
from leakexp.store import Store, atomic_write_json, config_hash
from leakexp.train import TrainConfig, configure_precision, resolve_device, set_seed, train, write_history

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

    def __init__(self, cfg: DictConfig, *, readonly: bool = False):
        self.cfg = cfg
        self.store = Store(cfg.store, create=not readonly)
        self.device = resolve_device(cfg.get("device", "auto"))
        configure_precision(cfg.precision)  # process-wide, from config, before any model runs
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
        return dict(k1=float(b.k1), b=float(b.b), threads=int(b.threads), verbose=self.verbose,
                    stemmer=str(b.stemmer), stopwords=str(b.stopwords))

    def index_path(self, name: str) -> Path:
        """Where the index of a test collection (or of the training pool, ``train``) lives; cheap."""
        from leakexp.retrieval import index_config

        b = self.cfg.bm25
        index_name, docs = (f"train-{self.cfg.data.name}", self.pool_fingerprint) if name == "train" else \
            (name, self.corpus_fingerprint(name))
        config = index_config(index_name, docs, k1=float(b.k1), b=float(b.b), stemmer=str(b.stemmer),
                              stopwords=str(b.stopwords))
        return self.store.keyed("index", index_name, config=config)

    def embed_paths(self) -> list[Path]:
        """Where the SBERT embeddings of every source's training queries live; cheap."""
        from leakexp.data.types import SOURCES

        return [detector.embed_path(self.store, self.cfg.data.name, pool=self.pool_fingerprint,
                                    sbert=str(self.cfg.detect.sbert), source=s)[0] for s in SOURCES]

    def index(self, name: str) -> Path:
        """PISA index of a test collection (``name`` = corpus) or of the training pool (``train``)."""
        if name == "train":
            return build_index(self.store, f"train-{self.pool.name}", iter(self.pool.docs),
                               fingerprint=self.pool_fingerprint, **self._bm25_kwargs())
        c = self.collection(name)
        return build_index(self.store, name, iter(c.docs), fingerprint=self.corpus_fingerprint(name),
                           **self._bm25_kwargs())

    def first_stage_file(self, corpus: str) -> Path | None:
        """The external first-stage run of ``corpus`` (``rerank.first_stage``), or None for leakexp's BM25.

        A value with ``{corpus}`` names one run per corpus; a plain path is the run of ``corpus=`` only.
        """
        spec = self.cfg.rerank.get("first_stage")
        if not spec:
            return None
        spec = str(spec)
        if "{corpus}" in spec:
            return Path(spec.format(corpus=corpus))
        if corpus != self.cfg.corpus.name:
            raise ValueError(f"rerank.first_stage={spec} is one run, for corpus={self.cfg.corpus.name}, but a cell of "
                             f"{corpus} needs its own; name one run per corpus with a template such as "
                             "rerank.first_stage='runs/{corpus}.bm25.gz'")
        return Path(spec)

    def test_run(self, corpus: str) -> pd.DataFrame:
        """The first-stage top-k of every topic of ``corpus`` that the models re-rank: leakexp's BM25 (the query
        field from ``rerank.query_field``) or an external TREC run (``rerank.first_stage``)."""
        field = self.cfg.rerank.query_field
        topics = self.collection(corpus).topics_frame(field)
        external = self.first_stage_file(corpus)
        if external is not None:
            return read_trec_run(external, topics, depth=int(self.cfg.rerank.depth))
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
                collection_fingerprints=[self.corpus_fingerprint(c) for c in self.corpora],
            )
        return self._memo["candidates"]

    def detect_config(self) -> dict:
        d = self.cfg.detect
        return detector.detect_config(pool=self.pool_fingerprint, sbert=str(d.sbert), k=int(d.k), fields=list(d.fields),
                                      collections=[self.corpus_fingerprint(c) for c in self.corpora])

    def detect_path(self) -> Path:
        """Where the candidate table of this config lives (cheap: loads no data)."""
        return detector.detect_path(self.store, self.cfg.data.name, self.detect_config())

    def _detect_hash(self) -> str:
        return config_hash(self.detect_config())

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
                ann = verifier.read_annotations([tmp / "annotations.jsonl"], allow_empty=True)
            else:
                verifier.write_annotations(tmp / "review.jsonl", verifier.to_annotation_records(review, collections))
                ann = verifier.read_annotations(files)
            ann.assign(labels=ann.labels.map(lambda x: "|".join(x))).to_parquet(tmp / "annotations.parquet",
                                                                                 index=False)
            pairs = detector.leak_pairs(cands, threshold)
            leaking = {c.name: sorted(verifier.verified_leaks(ann, list(c.topics), corpus=c.name,
                                                              pairs=pairs).topic_qid.unique())
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

    def set_path(self, corpus: str, leakage: str, size: int) -> Path:
        """Where the training set of this config lives (cheap: loads no data)."""
        return self.store.keyed("sets", corpus, leakage, size, config=self.set_config(corpus, leakage, size))

    def training_set(self, corpus: str, leakage: str, size: int) -> Path:
        """The training set artifact ``sets/<corpus>/<leakage>/<size>/<config>``."""
        config = self.set_config(corpus, leakage, size)
        if not self.store.is_done(self.store.keyed("sets", corpus, leakage, size, config=config), config):
            self.annotations()  # detection and verification first; their hashes enter the set's config
            config = self.set_config(corpus, leakage, size)
        path = self.store.keyed("sets", corpus, leakage, size, config=config)

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
        path = self.store.keyed("models", "monot5-embedded", self.cfg.data.name, config=config)

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
        run = OmegaConf.to_container(self.cfg.train, resolve=True)
        return m, TrainConfig.from_config(train_cfg, run, bf16=bool(self.cfg.precision.train_bf16))

    def reads_idf(self, model: str) -> bool:
        params = OmegaConf.to_container(self.model_cfg(model), resolve=True)
        return get_model_class(model).reads_idf(params)

    # -- document frequencies of a collection (idf of KNRM / PACRR / DUET, as Capreolus reads its index) ---------
    def df_config(self, name: str) -> dict:
        """What the df table of a collection (``train`` = the training pool) depends on; cheap."""
        from leakexp.models.vectors import TOKENIZER_VERSION

        docs = self.pool_fingerprint if name == "train" else self.corpus_fingerprint(name)
        return {"stage": "df", "collection": docs, "tokenizer": TOKENIZER_VERSION}

    def df_table(self, name: str):
        """The df table (an ``IdfTable``) of a test collection or of the training pool, computed once, stored."""
        from leakexp.models.capreolus import IdfTable

        key = f"df:{name}"
        if key not in self._memo:
            config = self.df_config(name)
            docs = self.pool.docs if name == "train" else self.collection(name).docs

            def compute(tmp: Path) -> dict:
                table = IdfTable.from_docs((t for _, t in docs), progress=self.verbose)
                table.save(tmp / "df.parquet")
                return {"documents": table.n_docs, "terms": len(table.df)}

            path = self.store.ensure(self.store.keyed("df", name, config=config), config, compute)
            self._memo[key] = IdfTable.load(path / "df.parquet")
        return self._memo[key]

    def load_model(self, cell: Cell, corpus: str | None = None):
        """The trained model of ``cell`` on this pipeline's device, ready to rank ``corpus`` (default: the cell's
        own): models that read idf get that collection's df table."""
        model = load_checkpoint(self.trained(cell)).to(self.device)
        if model.needs_idf:
            model.use_idf(self.df_table(corpus or cell.corpus))
        return model

    def rerank_bf16(self) -> bool:
        return self.device.startswith("cuda") and bool(self.cfg.precision.rerank_bf16)

    def train_config(self, cell: Cell) -> dict | None:
        """What a trained model depends on; None while its training set is not built (cheap otherwise)."""
        m = self.store.valid_marker(self.set_path(cell.corpus, cell.leakage, cell.size))
        if m is None:
            return None
        params = OmegaConf.to_container(self.model_cfg(cell.model), resolve=True)
        params.get("train", {}).pop("score_batch_size", None)  # inference batching does not change the model
        cuda = self.device.startswith("cuda")
        config = {"stage": "train", "set": m.figures["content_hash"], "model": cell.model, "params": params,
                  "budget": OmegaConf.to_container(self.cfg.train, resolve=True), "seed": cell.seed,
                  "device": "cuda" if cuda else "cpu"}
        if cuda:
            config["precision"] = {"matmul": str(self.cfg.precision.matmul), "bf16": bool(self.cfg.precision.train_bf16)}
        if self.reads_idf(cell.model):
            config["df"] = config_hash(self.df_config("train"))
        return config

    def first_stage_config(self, corpus: str) -> dict:
        """What the first-stage run that a corpus's models re-rank depends on."""
        b = self.cfg.bm25
        config = {"stage": "first-stage", "collection": self.corpus_fingerprint(corpus),
                  "field": self.cfg.rerank.query_field, "depth": int(self.cfg.rerank.depth)}
        external = self.first_stage_file(corpus)
        if external is not None:
            return {**config, "run": sources.file_fingerprint(external)}
        return {**config, "bm25": {"k1": float(b.k1), "b": float(b.b), "stemmer": str(b.stemmer),
                                   "stopwords": str(b.stopwords)}}

    def rerank_config(self, cell: Cell) -> dict | None:
        train = self.train_config(cell)
        if train is None:
            return None
        config = {"stage": "rerank", "train": config_hash(train), "first_stage": self.first_stage_config(cell.corpus)}
        if self.rerank_bf16():
            config["bf16"] = True
        if self.reads_idf(cell.model):
            config["df"] = config_hash(self.df_config(cell.corpus))
        return config

    def eval_config(self, cell: Cell) -> dict | None:
        rerank = self.rerank_config(cell)
        if rerank is None:
            return None
        e = self.cfg.evaluate
        return {"stage": "eval", "rerank": config_hash(rerank), "measures": list(e.measures),
                "mfr_missing": e.mfr_missing, "no_relevant": e.no_relevant,
                "qrels": self.corpus_fingerprint(cell.corpus)}

    STAGE_CONFIGS = {"train": "train_config", "rerank": "rerank_config", "eval": "eval_config"}

    def cell_path(self, stage: str, cell: Cell) -> Path | None:
        """Where ``stage``'s artifact of ``cell`` lives under this config; None while an upstream artifact
        it depends on is missing. Cheap: reads markers, loads no data, computes nothing."""
        config = getattr(self, self.STAGE_CONFIGS[stage])(cell)
        return None if config is None else self.store.keyed(stage, *cell.parts(), config=config)

    def trained(self, cell: Cell) -> Path:
        set_path = self.training_set(cell.corpus, cell.leakage, cell.size)
        config = self.train_config(cell)
        path = self.store.keyed("train", *cell.parts(), config=config)

        def compute(tmp: Path) -> dict:
            instances = pd.read_parquet(set_path / "instances.parquet")
            params, tcfg = self._model_params(cell.model)
            set_seed(cell.seed)  # the seed also fixes the random initialisation
            model = get_model_class(cell.model)(**params)
            if model.needs_idf:  # the training documents' collection (Capreolus reads the index at hand)
                model.use_idf(self.df_table("train"))
            result = train(model, instances, seed=cell.seed, cfg=tcfg, device=self.device, progress=self.verbose or None)
            model.save(tmp)
            write_history(result.history, tmp / "history.csv")
            atomic_write_json(tmp / "manifest.json", {"cell": str(cell), "seed": cell.seed, **result})
            return {k: result[k] for k in ("instances", "updates", "final_loss", "seconds")}

        return self.store.ensure(path, config, compute)

    def reranked(self, cell: Cell) -> Path:
        self.trained(cell)  # the model (and its training set) first: the re-ranking config reads them
        config = self.rerank_config(cell)
        path = self.store.keyed("rerank", *cell.parts(), config=config)
        if self.store.is_done(path, config):
            return path
        run = self.test_run(cell.corpus)

        def compute(tmp: Path) -> dict:
            model = self.load_model(cell)
            batch = int(self.model_cfg(cell.model).get("train", {}).get("score_batch_size", 64))
            res = rerank(model, run, self.collection(cell.corpus).docs, batch_size=batch, device=self.device,
                         bf16=self.rerank_bf16())
            res.to_parquet(tmp / "run.parquet", index=False)
            write_trec_run(res, tmp / "run.trec.gz", f"leakexp-{cell.model}-{cell.leakage}-{cell.size}-s{cell.seed}")
            return {"queries": int(res.qid.nunique()), "rows": len(res)}

        return self.store.ensure(path, config, compute)

    def evaluated(self, cell: Cell) -> pd.DataFrame:
        run_path = self.reranked(cell)
        e = self.cfg.evaluate
        config = self.eval_config(cell)
        path = self.store.keyed("eval", *cell.parts(), config=config)

        def compute(tmp: Path) -> dict:
            run = pd.read_parquet(run_path / "run.parquet")
            coll = self.collection(cell.corpus)
            topics = list(coll.topics)
            pq = per_query(run, coll.qrels, list(e.measures), mfr_missing=e.mfr_missing,
                           depth=int(self.cfg.rerank.depth), no_relevant=e.no_relevant, topics=topics)
            pq.to_parquet(tmp / "perquery.parquet", index=False)
            figures = {m: round(float(v), 6) for m, v in pq.groupby("measure").value.mean().items()}
            return {**figures, "without_relevant": without_relevant(coll.qrels, topics)}

        self.store.ensure(path, config, compute)
        out = pd.read_parquet(path / "perquery.parquet")
        return out.assign(corpus=cell.corpus, leakage=cell.leakage, size=cell.size, model=cell.model, seed=cell.seed)

    def run_cell(self, cell: Cell) -> dict:
        """Everything one cell needs, computing only what the store lacks; returns its mean measures."""
        from leakexp import memorization

        pq = self.evaluated(cell)
        memorization.memorize_ready(self, cell)  # once a leaked cell and its None cell are both re-ranked
        return pq.groupby("measure").value.mean().to_dict()

    def cell_state(self, stage: str, cell: Cell) -> tuple[str, Path | None, str]:
        """(state, path, detail) of one stage artifact of a cell under this config, computing nothing.

        state is done, running, failed, damaged (files differ from the marker: recomputed when next needed),
        stale (only artifacts of other configurations are stored), or missing (also when an upstream
        artifact is missing, then path is None).
        """
        try:
            path = self.cell_path(stage, cell)
        except Exception as exc:  # e.g. annotation files not given yet: nothing of this config can exist
            return "missing", None, f"{type(exc).__name__}: {exc}"
        return artifact_state(self.store, path)

    def stored_results(self, cells: list[Cell]) -> tuple[pd.DataFrame, dict[Cell, str]]:
        """Per-query values of the finished cells among ``cells`` (from the store alone), and the state of
        every cell that has none (missing, failed, stale, running)."""
        frames, states = [], {}
        for cell in cells:
            state, path, _ = self.cell_state("eval", cell)
            if state != "done":
                states[cell] = state
                continue
            pq = pd.read_parquet(path / "perquery.parquet")
            frames.append(pq.assign(corpus=cell.corpus, leakage=cell.leakage, size=cell.size, model=cell.model,
                                    seed=cell.seed))
        if not frames:
            empty = pd.DataFrame(columns=["qid", "measure", "value", "corpus", "leakage", "size", "model", "seed"])
            return empty, states
        return pd.concat(frames, ignore_index=True), states


def artifact_state(store: Store, path: Path | None) -> tuple[str, Path | None, str]:
    """(state, path, detail): done (intact marker), damaged (marker, but files missing or truncated), running
    (lock held), failed (error recorded), stale (no artifact of this config, but some of other configs beside
    it), or missing."""
    if path is None:
        return "missing", None, "an upstream artifact is missing"
    marker = store.marker(path)
    if marker is not None:
        damaged = store.damaged_files(path, marker)
        if not damaged:
            return "done", path, ""
        return "damaged", path, ", ".join(damaged)
    if store.is_locked(path):
        return "running", path, store.holder(path)
    failure = store.failure_path(path)
    if failure.exists():
        try:
            error = json.loads(failure.read_text()).get("error", "")
        except (OSError, ValueError, AttributeError):
            error = "(unreadable failure record)"
        return "failed", path, error
    others = store.others(path)
    if others:
        return "stale", path, f"{len(others)} artifact(s) of other configurations"
    return "missing", path, ""
