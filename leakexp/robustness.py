"""Robustness of the trained re-rankers, with and without leakage (Wu et al., "Are Neural Ranking Models
Robust?", TOIS; ``shared/seeds/004``), and whether leakage makes a model more brittle.

Per grid cell (a trained model), cached in the store, each part its own config-keyed artifact:

- ``iid``: per-topic AP and the effectiveness measure (``robustness.measure``, nDCG@10) of the cell's stored
  re-ranked run — the performance variance (VNAP, Section 3.2) and the worst-performing topics (Section 3.5);
- ``ood-<corpus>``: the model (trained for its own corpus, whose leaked queries it saw) re-ranking the BM25
  runs of the grid's other corpora — the out-of-distribution drop DR_OOD (Section 4.2.2, Eq. 11);
- ``<attack>``: the test titles under a seeded query attack (``leakexp.attacks``), BM25 re-run with the attacked
  query (``first_stage: bm25``, default: a user's typo reaches the whole system) or the original BM25 pool
  re-ranked for it (``first_stage: pool``) — DR_query (Section 5.1.2, Eq. 16);
- ``doc-<manipulation>``: rankings before and after manipulated documents — Top Change and the normalised
  Kendall-tau distance (Section 5.2.2, Eqs. 20-22).

Attacked queries and manipulated documents are shared by every model of a corpus (artifacts
``robustness/<corpus>/attacked-queries/<attack>/`` and ``robustness/<corpus>/manipulated-docs/<kind>/``, TSV for
reading), so leaked and unleaked models meet the same attacks and can be compared topic by topic. Only new
scores are computed: unattacked topics keep the stored run, a manipulation re-scores only the changed documents.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from scipy import stats as sps

from leakexp import attacks
from leakexp.config import ConfigError
from leakexp.evaluate import LOWER_IS_BETTER, per_query
from leakexp.pipeline import Cell, Pipeline, artifact_state, grid_cells
from leakexp.store import atomic_write_text, config_hash

log = logging.getLogger(__name__)

FIRST_STAGES = ("bm25", "pool")
LEAKAGE_LABEL = {"none": "None", "msm": "MSM", "test": "Test"}


# =========================================================================================================
# Measures (pure functions on hand-made data)
# =========================================================================================================
def vnap(ap: Sequence[float]) -> float:
    """Variance of normalised average precision over test queries (Wu et al., Section 3.2, Eqs. 5-6):
    NAP(q) = AP(q) / mean AP, VNAP = E[(NAP - E[NAP])^2], the expectation uniform over queries (population
    variance, ddof 0). Lower is more robust. NaN without queries or when every AP is 0."""
    a = np.asarray(list(ap), dtype=float)
    if a.size == 0 or a.mean() == 0:
        return float("nan")
    nap = a / a.mean()
    return float(np.mean((nap - nap.mean()) ** 2))


def worst_queries(values: pd.Series, fraction: float) -> list[str]:
    """The ceil(fraction * n) topics with the lowest values (ties by qid): the poorly-performing queries of
    Wu et al., Section 3.5, taken here as the bottom fraction of the no-leakage model's topics."""
    if not 0 < fraction <= 1:
        raise ValueError(f"worst-query fraction {fraction} must be in (0, 1]")
    v = values.dropna()
    k = math.ceil(fraction * len(v))
    order = sorted(v.index, key=lambda q: (v[q], str(q)))
    return [str(q) for q in order[:k]]


def drop_rate(new: float, reference: float) -> float:
    """(P_new - P_ref) / P_ref: DR_OOD (Wu et al., Section 4.1.2, Eq. 11; P_new = P_OOD, P_ref = P_I.I.D.) and
    DR_query (Section 5.1.2, Eq. 16; P_new = P_t on attacked, P_ref = P_o on original queries). Negative is a
    drop; higher is more robust. NaN when P_ref is 0 (no drop rate exists)."""
    if reference == 0 or np.isnan(reference) or np.isnan(new):
        return float("nan")
    return float((new - reference) / reference)


def drop_contributions(new: pd.Series, reference: pd.Series | float) -> pd.Series:
    """Per-topic terms whose mean is the drop rate: (new(q) - ref(q)) / mean(ref), or (new(q) - P_ref) / P_ref
    for a scalar reference (DR_OOD). They give the paired tests of leaked vs. no leakage a per-topic value."""
    if isinstance(reference, pd.Series):
        ref_mean = float(reference.mean())
        diff = new - reference
    else:
        ref_mean = float(reference)
        diff = new - ref_mean
    if ref_mean == 0 or np.isnan(ref_mean):
        return diff * np.nan
    return diff / ref_mean


def strict_ranking(run: pd.DataFrame) -> list[str]:
    """Docnos of one topic's run by score descending, ties by docno ascending (the pipeline's order)."""
    return run.sort_values(["score", "docno"], ascending=[False, True], kind="mergesort").docno.astype(str).tolist()


def rescored_rankings(run: pd.DataFrame, before: dict[str, float],
                      after: dict[str, float]) -> tuple[list[str], list[str]]:
    """One topic's ranking before and after a document manipulation: the stored scores (docno, score), with
    the manipulated documents' scores replaced by their re-scored original (``before``) and manipulated
    (``after``) text. Both rankings hold the same documents."""
    if set(after) != set(before) or not set(before) <= set(run.docno):
        raise ValueError("before and after must re-score the same documents of the run")
    b = run[["docno", "score"]].copy()
    a = b.copy()
    b["score"] = [before.get(d, s) for d, s in zip(b.docno, b.score)]
    a["score"] = [after.get(d, s) for d, s in zip(a.docno, a.score)]
    return strict_ranking(b), strict_ranking(a)


def top_change(before: Sequence[str], after: Sequence[str]) -> int:
    """TC (Wu et al., Section 5.2.2, Eq. 20, after Goren et al. [27]): 1 if the top document differs."""
    if not before or not after:
        raise ValueError("top change needs two non-empty rankings")
    return int(before[0] != after[0])


def kendall_tau_distance(before: Sequence[str], after: Sequence[str]) -> float:
    """Normalised Kendall-tau distance KT (Wu et al., Section 5.2.2, Eqs. 21-22): discordant pairs of two
    rankings of the *same* documents over n(n-1)/2.

    Both rankings are strict orders (the pipeline breaks score ties by docno), so no pair is tied and
    scipy's tau-b equals (C - D) / (n(n-1)/2) with C + D = n(n-1)/2, hence KT = (1 - tau) / 2 exactly.
    NaN for fewer than two documents (no pairs)."""
    b, a = list(before), list(after)
    if len(set(b)) != len(b) or len(set(a)) != len(a):
        raise ValueError("a ranking lists a document twice")
    if set(b) != set(a):
        raise ValueError(f"Kendall-tau distance needs rankings of the same documents; only in one: "
                         f"{sorted(set(b) ^ set(a))[:5]}")
    n = len(b)
    if n < 2:
        return float("nan")
    pos = {d: i for i, d in enumerate(a)}
    tau = sps.kendalltau(np.arange(n), [pos[d] for d in b])[0]
    return float((1.0 - tau) / 2.0)


# =========================================================================================================
# Settings
# =========================================================================================================
@dataclass(frozen=True)
class Settings:
    """The ``robustness:`` block of the config, checked."""

    corpora: tuple[str, ...] | None
    sizes: tuple[int, ...] | None
    query_attacks: tuple[str, ...]
    first_stage: str
    doc_manipulations: tuple[str, ...]
    stuff_repeats: int
    stuff_from_rank: int
    noise_rate: float
    ood: tuple[str, ...] | None
    measure: str
    worst: tuple[float, ...]
    seed: int
    synonyms: str
    misspellings: str


def _list(v) -> list | None:
    if v is None:
        return None
    return list(OmegaConf.to_container(v, resolve=True)) if OmegaConf.is_list(v) else list(v)


def settings(cfg: DictConfig) -> Settings:
    """The robustness settings of ``cfg``; a bad value raises ConfigError naming the key and the fix."""
    r = cfg.get("robustness")
    if r is None:
        raise ConfigError("the config has no 'robustness' block; use leakexp's conf/config.yaml")
    try:
        qa = tuple(attacks.check_attack(a) for a in (_list(r.get("query_attacks")) or []))
        dm = tuple(attacks.check_manipulation(d) for d in (_list(r.get("doc_manipulations")) or []))
    except attacks.AttackError as exc:
        raise ConfigError(f"robustness: {exc}") from None
    mode = r.get("first_stage", "bm25")
    if mode not in FIRST_STAGES:
        raise ConfigError(f"robustness.first_stage={mode} is unknown; use bm25 (re-run BM25 with the attacked query) "
                          "or pool (re-rank the original BM25 pool)")
    measure = str(r.get("measure", "nDCG@10"))
    if measure in LOWER_IS_BETTER:
        raise ConfigError(f"robustness.measure={measure}: drop rates need a higher-is-better measure, e.g. nDCG@10")
    try:
        import ir_measures

        ir_measures.parse_measure(measure)
    except Exception:
        raise ConfigError(f"robustness.measure={measure!r} cannot be parsed; e.g. nDCG@10, AP, P@10") from None
    worst = tuple(float(f) for f in (_list(r.get("worst")) or []))
    if any(not 0 < f <= 1 for f in worst):
        raise ConfigError(f"robustness.worst={list(worst)}: fractions must be in (0, 1], e.g. [0.1, 0.25]")
    stuff, noise = r.get("stuff", {}) or {}, r.get("noise", {}) or {}
    repeats, from_rank, rate = stuff.get("repeats", 3), stuff.get("from_rank", 10), noise.get("rate", 0.1)
    if not (isinstance(repeats, int) and repeats >= 1):
        raise ConfigError(f"robustness.stuff.repeats={repeats!r} must be an integer >= 1")
    if not (isinstance(from_rank, int) and from_rank >= 1):
        raise ConfigError(f"robustness.stuff.from_rank={from_rank!r} must be an integer >= 1 (a 0-based "
                          "first-stage rank below the top)")
    if not (isinstance(rate, (int, float)) and 0 < rate <= 1):
        raise ConfigError(f"robustness.noise.rate={rate!r} must be a fraction of words in (0, 1]")
    grid = cfg.grid
    if r.get("sizes") == "largest":  # the grid's largest size, whatever the grid (the demo's choice)
        sizes = [max(int(s) for s in grid.sizes)]
    else:
        sizes = _list(r.get("sizes"))
        bad = [v for v in sizes or [] if not (isinstance(v, int) and v > 0)]
        if bad:
            raise ConfigError(f"robustness.sizes has {bad[0]!r}; use training-set sizes, 'largest' or null")
    corpora, ood = _list(r.get("corpora")), _list(r.get("ood"))
    # corpora and sizes outside this grid are simply not run (a narrowed grid keeps working); names must exist
    for key, values in (("corpora", corpora), ("ood", ood)):
        bad = [v for v in values or [] if v not in list(cfg.data.corpora)]
        if bad:
            raise ConfigError(f"robustness.{key} has {bad[0]!r}, which is not in data.corpora="
                              f"{list(cfg.data.corpora)}; choose from those or null")
    for key in ("synonyms", "misspellings"):
        value = str(r.get(key, "bundled"))
        if value != "bundled":
            try:
                attacks.load_wordlist(value)
            except attacks.AttackError as exc:
                raise ConfigError(f"robustness.{key}: {exc}") from None
    return Settings(
        corpora=None if corpora is None else tuple(corpora),
        sizes=None if sizes is None else tuple(int(s) for s in sizes),
        query_attacks=qa, first_stage=mode, doc_manipulations=dm, stuff_repeats=int(repeats),
        stuff_from_rank=int(from_rank), noise_rate=float(rate), ood=None if ood is None else tuple(ood),
        measure=measure, worst=worst, seed=int(r.get("seed", 0)), synonyms=str(r.get("synonyms", "bundled")),
        misspellings=str(r.get("misspellings", "bundled")),
    )


def robustness_cells(cfg: DictConfig) -> list[Cell]:
    """The grid cells that get robustness artifacts (``robustness.corpora`` / ``robustness.sizes``)."""
    s = settings(cfg)
    return [c for c in grid_cells(cfg) if (s.corpora is None or c.corpus in s.corpora)
            and (s.sizes is None or c.size in s.sizes)]


# =========================================================================================================
# The stage: configs (cheap) and computation
# =========================================================================================================
class _Stage:
    """The robustness artifacts of one Pipeline's config: where they live and how to compute them."""

    def __init__(self, p: Pipeline):
        self.p, self.s = p, settings(p.cfg)

    # -- configs and paths (cheap: read markers, load no data) --------------------------------------------
    def _rerank_key(self, cell: Cell) -> str | None:
        c = self.p.rerank_config(cell)
        return None if c is None else config_hash(c)

    def _wordlists_key(self) -> list[str]:
        """The word lists' content (not their paths or times): an edited list redoes the word attacks."""
        from leakexp.store import file_digest

        return [file_digest(attacks.bundled_wordlist(n) if v == "bundled" else Path(v))
                for n, v in (("synonyms", self.s.synonyms), ("misspellings", self.s.misspellings))]

    def ood_targets(self, cell: Cell) -> list[str]:
        targets = self.s.ood if self.s.ood is not None else tuple(self.p.cfg.grid.corpora)
        return [c for c in dict.fromkeys(targets) if c != cell.corpus]

    def queries_config(self, corpus: str, attack: str) -> dict:
        b = self.p.cfg.bm25
        return {"stage": "robustness-queries", "corpus": corpus, "first_stage": self.p.first_stage_config(corpus),
                "attack": attack, "seed": self.s.seed, "mode": self.s.first_stage,
                "wordlists": self._wordlists_key() if attack.startswith("word-") else None,
                "bm25": {"k1": float(b.k1), "b": float(b.b)}}

    def docs_config(self, corpus: str, kind: str) -> dict:
        params = ({"repeats": self.s.stuff_repeats, "from_rank": self.s.stuff_from_rank} if kind == "stuff"
                  else {"rate": self.s.noise_rate})
        return {"stage": "robustness-docs", "corpus": corpus, "first_stage": self.p.first_stage_config(corpus),
                "kind": kind, "seed": self.s.seed, "params": params}

    def shared_path(self, corpus: str, what: str, name: str, config: dict) -> Path:
        return self.p.store.keyed("robustness", corpus, what, name, config=config)

    def part_configs(self, cell: Cell) -> dict[str, dict | None]:
        """Every part of a cell's robustness: name -> config (None while the cell is not re-ranked yet)."""
        rerank = self._rerank_key(cell)
        train = self.p.train_config(cell)
        m = self.s.measure
        qrels = self.p.corpus_fingerprint(cell.corpus)
        parts: dict[str, dict | None] = {}
        parts["iid"] = None if rerank is None else {
            "stage": "robustness-iid", "rerank": rerank, "qrels": qrels, "measures": [m, "AP"]}
        for target in self.ood_targets(cell):
            parts[f"ood-{target}"] = None if train is None else {
                "stage": "robustness-ood", "train": config_hash(train),
                "first_stage": self.p.first_stage_config(target), "qrels": self.p.corpus_fingerprint(target),
                "measure": m}
        for attack in self.s.query_attacks:
            parts[attack] = None if rerank is None else {
                "stage": "robustness-query", "rerank": rerank,
                "queries": config_hash(self.queries_config(cell.corpus, attack)), "qrels": qrels, "measure": m}
        for kind in self.s.doc_manipulations:
            parts[f"doc-{kind}"] = None if rerank is None else {
                "stage": "robustness-doc", "rerank": rerank, "docs": config_hash(self.docs_config(cell.corpus, kind))}
        return parts

    def part_path(self, cell: Cell, name: str, config: dict) -> Path:
        return self.p.store.keyed("robustness", *cell.parts(), name, config=config)

    def paths(self, cell: Cell) -> dict[str, Path | None]:
        return {n: None if c is None else self.part_path(cell, n, c) for n, c in self.part_configs(cell).items()}

    # -- shared artifacts: attacked queries, manipulated documents ----------------------------------------
    def _bm25_kwargs(self) -> dict:
        b = self.p.cfg.bm25
        return dict(k1=float(b.k1), b=float(b.b), threads=int(b.threads), verbose=self.p.verbose)

    def attacked_queries(self, corpus: str, attack: str) -> Path:
        """``attacks.tsv`` (qid, original, attacked, applied, edits) and ``pool.parquet``: the candidates the
        re-ranker scores for the attacked topics (BM25 re-run with the attacked query, or the original pool)."""
        config = self.queries_config(corpus, attack)
        path = self.shared_path(corpus, "attacked-queries", attack, config)

        def compute(tmp: Path) -> dict:
            from leakexp.retrieval import bm25_search

            topics = self.p.collection(corpus).topics_frame(self.p.cfg.rerank.query_field)
            lists = attacks.WordLists.load(self.s.synonyms, self.s.misspellings)
            att = attacks.attack_queries(topics, attack, self.s.seed, lists)
            applied = att[att.applied][["qid", "attacked"]].rename(columns={"attacked": "query"})
            if self.s.first_stage == "bm25":
                pool = bm25_search(self.p.index(corpus), applied, depth=int(self.p.cfg.rerank.depth),
                                   **self._bm25_kwargs())
            else:
                run = self.p.test_run(corpus)
                pool = run[run.qid.isin(set(applied.qid))].drop(columns="query").merge(applied, on="qid")
                pool = pool[["qid", "query", "docno", "score", "rank"]]
            att.to_parquet(tmp / "attacks.parquet", index=False)
            atomic_write_text(tmp / "attacks.tsv", att.to_csv(sep="\t", index=False))
            pool.reset_index(drop=True).to_parquet(tmp / "pool.parquet", index=False)
            return {"topics": len(att), "applied": int(att.applied.sum()), "pool_rows": len(pool)}

        return self.p.store.ensure(path, config, compute)

    def manipulated_docs(self, corpus: str, kind: str) -> Path:
        """``documents.tsv``/``.parquet``: stuffed documents (qid, docno, first_stage_rank, query, text), one per
        topic, or noisy documents (docno, edited_words, text) of every document in the corpus's BM25 pools."""
        config = self.docs_config(corpus, kind)
        path = self.shared_path(corpus, "manipulated-docs", kind, config)

        def compute(tmp: Path) -> dict:
            run = self.p.test_run(corpus)
            docs = self.p.collection(corpus).docs
            if kind == "stuff":
                frame = attacks.stuffing_targets(run, self.s.stuff_from_rank, self.s.seed)
                frame["text"] = [attacks.stuff_document(docs[d], q, self.s.stuff_repeats,
                                                        attacks.query_rng(self.s.seed, "stuff-text", str(qid)))
                                 for qid, q, d in zip(frame.qid, frame["query"], frame.docno)]
            else:
                rows = []
                for d in sorted(set(run.docno)):
                    text, n = attacks.noise_document(docs[d], self.s.noise_rate,
                                                     attacks.query_rng(self.s.seed, "noise", str(d)))
                    if n:
                        rows.append({"docno": d, "edited_words": n, "text": text})
                frame = pd.DataFrame(rows, columns=["docno", "edited_words", "text"])
            frame.to_parquet(tmp / "documents.parquet", index=False)
            atomic_write_text(tmp / "documents.tsv", frame.to_csv(sep="\t", index=False))
            return {"documents": len(frame)}

        return self.p.store.ensure(path, config, compute)

    # -- the cell -----------------------------------------------------------------------------------------
    def compute(self, cell: Cell) -> Path:
        p = self.p
        run_path = p.reranked(cell)
        configs = self.part_configs(cell)
        todo = {n: c for n, c in configs.items() if not p.store.is_done(self.part_path(cell, n, c), c)}
        if not todo:
            return p.store.path("robustness", *cell.parts())
        model_cache: dict = {}

        def model(corpus: str = cell.corpus):
            """The cell's model, ready to rank ``corpus`` (models that read idf take that collection's)."""
            if corpus not in model_cache:
                model_cache[corpus] = p.load_model(cell, corpus)
            return model_cache[corpus]

        batch = int(p.model_cfg(cell.model).get("train", {}).get("score_batch_size", 64))
        run = pd.read_parquet(run_path / "run.parquet")
        for name, config in todo.items():
            path = self.part_path(cell, name, config)
            if name == "iid":
                fn = self._iid(cell, run)
            elif name.startswith("ood-"):
                fn = self._ood(name[4:], model, batch)
            elif name.startswith("doc-"):
                fn = self._doc(cell, name[4:], run, model, batch)
            else:
                fn = self._query(cell, name, run, model, batch)
            p.store.ensure(path, config, fn)
        return p.store.path("robustness", *cell.parts())

    def _values(self, run: pd.DataFrame, corpus: str, measures: list[str]) -> pd.DataFrame:
        return per_query(run, self.p.collection(corpus).qrels, measures, depth=int(self.p.cfg.rerank.depth))

    def _iid(self, cell: Cell, run: pd.DataFrame) -> Callable[[Path], dict]:
        def compute(tmp: Path) -> dict:
            pq = self._values(run, cell.corpus, [self.s.measure, "AP"])
            pq.to_parquet(tmp / "perquery.parquet", index=False)
            ap = pq[pq.measure == "AP"].value
            return {"mean": float(pq[pq.measure == self.s.measure].value.mean()), "MAP": float(ap.mean()),
                    "VNAP": vnap(ap)}
        return compute

    def _ood(self, target: str, model, batch: int) -> Callable[[Path], dict]:
        def compute(tmp: Path) -> dict:
            from leakexp.rerank import rerank

            res = rerank(model(target), self.p.test_run(target), self.p.collection(target).docs, batch_size=batch,
                         device=self.p.device, bf16=self.p.rerank_bf16())
            res.to_parquet(tmp / "run.parquet", index=False)
            pq = self._values(res, target, [self.s.measure])
            pq.to_parquet(tmp / "perquery.parquet", index=False)
            return {"corpus": target, "mean": float(pq.value.mean()), "pairs": len(res)}
        return compute

    def _query(self, cell: Cell, attack: str, run: pd.DataFrame, model, batch: int) -> Callable[[Path], dict]:
        def compute(tmp: Path) -> dict:
            from leakexp.rerank import rerank

            shared = self.attacked_queries(cell.corpus, attack)
            att = pd.read_parquet(shared / "attacks.parquet")
            pool = pd.read_parquet(shared / "pool.parquet")
            applied = set(att.qid[att.applied])
            new = (rerank(model(), pool, self.p.collection(cell.corpus).docs, batch_size=batch, device=self.p.device,
                          bf16=self.p.rerank_bf16())
                   if len(pool) else pool.iloc[0:0])
            new.to_parquet(tmp / "run.parquet", index=False)  # only the attacked topics: all others are unchanged
            attacked_run = pd.concat([new, run[~run.qid.isin(applied)]], ignore_index=True)
            m = self.s.measure
            before = self._values(run, cell.corpus, [m]).set_index("qid").value
            after = self._values(attacked_run, cell.corpus, [m]).set_index("qid").value
            pq = pd.DataFrame({"qid": before.index, "applied": before.index.isin(applied),
                               "original": before.values, "attacked": after.reindex(before.index).values})
            pq.to_parquet(tmp / "perquery.parquet", index=False)
            a = pq[pq.applied]
            return {"applied": len(a), "scored_pairs": len(new),
                    "original": float(a.original.mean()) if len(a) else None,
                    "attacked": float(a.attacked.mean()) if len(a) else None,
                    "DR_query": drop_rate(a.attacked.mean(), a.original.mean()) if len(a) else None}
        return compute

    def _doc(self, cell: Cell, kind: str, run: pd.DataFrame, model, batch: int) -> Callable[[Path], dict]:
        def compute(tmp: Path) -> dict:
            docs = self.p.collection(cell.corpus).docs
            manip = pd.read_parquet(self.manipulated_docs(cell.corpus, kind) / "documents.parquet")
            # the (qid, docno) pairs to re-score: the stuffed document of each topic, or every noisy document
            if kind == "stuff":
                pairs = manip[["qid", "docno", "text"]].merge(run[["qid", "query", "docno"]], on=["qid", "docno"])
            else:
                pairs = run[["qid", "query", "docno"]].merge(manip[["docno", "text"]], on="docno")
            pairs = pairs.reset_index(drop=True)
            # original and manipulated text scored in one call, so that before and after differ only in the
            # manipulation (the other documents keep their stored scores)
            queries = pairs["query"].tolist()
            scores = model().score(queries * 2, [docs[d] for d in pairs.docno] + pairs.text.tolist(),
                                   batch_size=batch, device=self.p.device, bf16=self.p.rerank_bf16())
            pairs["before"], pairs["after"] = scores[:len(pairs)], scores[len(pairs):]
            rows = []
            for qid, g in run.groupby("qid", sort=True):
                changed = pairs[pairs.qid == qid]
                if changed.empty:
                    continue
                rb, ra = rescored_rankings(g, dict(zip(changed.docno, changed.before)),
                                           dict(zip(changed.docno, changed.after)))
                row = {"qid": qid, "documents": len(g), "manipulated": len(changed),
                       "TC": top_change(rb, ra), "KT": kendall_tau_distance(rb, ra),
                       "before_is_stored": rb == strict_ranking(g)}
                if kind == "stuff":
                    d = str(changed.docno.iloc[0])
                    row.update(docno=d, rank_before=rb.index(d), rank_after=ra.index(d))
                rows.append(row)
            pq = pd.DataFrame(rows)
            pq.to_parquet(tmp / "perquery.parquet", index=False)
            return {"topics": len(pq), "scored_pairs": 2 * len(pairs), "TC": float(pq.TC.mean()) if len(pq) else None,
                    "KT": float(pq.KT.mean()) if len(pq) else None}
        return compute


# =========================================================================================================
# API for the pipeline, the CLI and status
# =========================================================================================================
def robustness_paths(p: Pipeline, cell: Cell) -> dict[str, Path | None]:
    """Where each robustness part of ``cell`` lives under this config (None while the cell is not re-ranked
    yet). Cheap: reads markers, loads no data; for ``leakexp status``."""
    return _Stage(p).paths(cell)


def robust(p: Pipeline, cell: Cell) -> Path:
    """Compute (once) every robustness part of ``cell`` and everything it lacks upstream; returns the cell's
    folder ``robustness/<corpus>/<leakage>/<size>/<model>/seed-<n>/`` (one config-keyed artifact per part)."""
    return _Stage(p).compute(cell)


def robust_all(p: Pipeline, cells: list[Cell]) -> list[tuple[Cell, Exception]]:
    """``robust`` for every cell with a progress bar; a failing cell is logged and skipped. Returns failures."""
    from tqdm.auto import tqdm

    failed = []
    for cell in tqdm(cells, desc="robustness", unit="cell"):
        try:
            robust(p, cell)
        except Exception as exc:
            failed.append((cell, exc))
            log.error("robustness of %s failed: %s: %s", cell, type(exc).__name__, exc)
    return failed


def cell_state(p: Pipeline, cell: Cell) -> str:
    """done if every robustness part of the cell is done, else the first of failed, damaged, stale, running,
    missing among its parts."""
    states = [artifact_state(p.store, path)[0] for path in robustness_paths(p, cell).values()]
    for s in ("failed", "damaged", "stale", "running", "missing"):
        if s in states:
            return s
    return "done"


# =========================================================================================================
# Tables and figure (from the store alone)
# =========================================================================================================
def stored_values(p: Pipeline, cells: list[Cell]) -> tuple[pd.DataFrame, dict[Cell, str]]:
    """Per-topic values of every finished robustness part: columns corpus, leakage, size, model, seed, part,
    kind (iid, ood, query, doc), target (OOD corpus), qid, measure, value, original (query attacks), applied.
    Also the state of every cell lacking a part."""
    frames, states = [], {}
    for cell in cells:
        st = cell_state(p, cell)
        if st != "done":
            states[cell] = st
        for name, path in robustness_paths(p, cell).items():
            if path is None or artifact_state(p.store, path)[0] != "done":
                continue
            pq = pd.read_parquet(path / "perquery.parquet")
            if name == "iid":
                f = pq.assign(kind="iid", target=cell.corpus, original=np.nan, applied=True)
            elif name.startswith("ood-"):
                f = pq.assign(kind="ood", target=name[4:], original=np.nan, applied=True)
            elif name.startswith("doc-"):
                if pq.empty:
                    continue
                f = pd.concat([pq[["qid"]].assign(measure=m, value=pq[m].astype(float)) for m in ("TC", "KT")])
                f = f.assign(kind="doc", target=cell.corpus, original=np.nan, applied=True)
            else:
                f = pq.rename(columns={"attacked": "value"}).assign(kind="query", target=cell.corpus,
                                                                     measure=p.cfg.robustness.measure)
            frames.append(f.assign(part=name, corpus=cell.corpus, leakage=cell.leakage, size=cell.size,
                                   model=cell.model, seed=cell.seed))
    cols = ["corpus", "leakage", "size", "model", "seed", "part", "kind", "target", "qid", "measure", "value",
            "original", "applied"]
    if not frames:
        return pd.DataFrame(columns=cols), states
    out = pd.concat(frames, ignore_index=True)[cols]
    out["qid"] = out.qid.astype(str)
    return out, states


def _per_seed_and_topic(values: pd.DataFrame, s: Settings) -> tuple[dict, dict]:
    """For one (corpus, size, model, leakage): {column: [value per seed]} and {column: per-topic Series (seed
    mean)} for the columns that have per-topic values."""
    per_seed: dict[str, list[float]] = {}
    per_topic: dict[str, list[pd.Series]] = {}  # one Series (qid -> value) per seed
    iid = values[values.kind == "iid"]

    def add(col: str, seed_value: float, topic: pd.Series | None = None) -> None:
        per_seed.setdefault(col, []).append(seed_value)
        if topic is not None:
            per_topic.setdefault(col, []).append(topic)

    for seed in sorted(values.seed.unique()):
        v = values[values.seed == seed]
        i = iid[iid.seed == seed]
        eff = i[i.measure == s.measure].set_index("qid").value
        ap = i[i.measure == "AP"].value
        if len(eff):
            add(s.measure, float(eff.mean()), eff)
            add("VNAP", vnap(ap))
        ood = v[v.kind == "ood"]
        if len(ood) and len(eff):
            p_iid = float(eff.mean())
            add("DR_OOD", drop_rate(float(ood.value.mean()), p_iid),
                drop_contributions(ood.set_index(ood.target + "/" + ood.qid).value, p_iid))
        for part, q in v[v.kind == "query"].groupby("part"):
            q = q[q.applied.astype(bool)].set_index("qid")
            add(f"DR {part}", drop_rate(float(q.value.mean()), float(q.original.mean())) if len(q) else np.nan,
                drop_contributions(q.value, q.original) if len(q) else None)
        for part, d in v[v.kind == "doc"].groupby("part"):
            for m in ("TC", "KT"):
                x = d[d.measure == m].set_index("qid").value
                add(f"{m} {part[4:]}", float(x.mean()), x)
    topic_means = {c: pd.concat(ts, axis=1).mean(axis=1) for c, ts in per_topic.items()}
    return per_seed, topic_means


def robustness_frame(values: pd.DataFrame, s: Settings, alpha: float = 0.05) -> pd.DataFrame:
    """Long table: one row per (corpus, size, model, leakage, column) with the mean and standard deviation over
    seeds, the number of seeds and topics, and the paired t-test against no leakage (Bonferroni over the
    leaked types of that model and column, as ``leakexp.stats.evaluate_corpus`` corrects)."""
    from leakexp.stats import bonferroni, paired_t

    rows = []
    for (corpus, size, model), g in values.groupby(["corpus", "size", "model"], sort=True):
        stats_by_leak = {l: _per_seed_and_topic(gl, s) for l, gl in g.groupby("leakage")}
        # worst topics: the no-leakage model's bottom fraction by the measure (mean over its seeds)
        none_iid = g[(g.leakage == "none") & (g.kind == "iid") & (g.measure == s.measure)]
        none_topic = none_iid.groupby("qid").value.mean()
        for frac in s.worst:
            col = f"worst {round(frac * 100):g}%"
            worst = set(worst_queries(none_topic, frac)) if len(none_topic) else set()
            for leakage, gl in g.groupby("leakage"):
                eff = gl[(gl.kind == "iid") & (gl.measure == s.measure) & gl.qid.isin(worst)]
                if eff.empty:
                    continue
                per_seed = eff.groupby("seed").value.mean().tolist()
                stats_by_leak[leakage][0][col] = per_seed
                stats_by_leak[leakage][1][col] = eff.groupby("qid").value.mean()
        columns = list(dict.fromkeys(c for st in stats_by_leak.values() for c in st[0]))
        for col in columns:
            tests = {}
            base = stats_by_leak.get("none", ({}, {}))[1].get(col)
            leaked = [l for l in ("msm", "test") if l in stats_by_leak and col in stats_by_leak[l][1]]
            if base is not None and leaked:
                raw = {l: paired_t(stats_by_leak[l][1][col], base) for l in leaked}
                corrected = dict(zip(leaked, bonferroni([raw[l][0] for l in leaked])))
                tests = {l: (raw[l][0], corrected[l], raw[l][1]) for l in leaked}
            for leakage, (per_seed, per_topic) in stats_by_leak.items():
                if col not in per_seed:
                    continue
                vals = np.asarray(per_seed[col], dtype=float)
                p, pc, n = tests.get(leakage, (np.nan, np.nan, 0))
                rows.append({"corpus": corpus, "size": int(size), "model": model, "leakage": leakage, "column": col,
                             "mean": float(np.nanmean(vals)) if np.isfinite(vals).any() else np.nan,
                             "std": float(np.nanstd(vals, ddof=1)) if np.isfinite(vals).sum() > 1 else np.nan,
                             "seeds": int(np.isfinite(vals).sum()),
                             "topics": int(per_topic[col].notna().sum()) if col in per_topic else np.nan,
                             "p": p, "p_bonferroni": pc, "paired_topics": n,
                             "significant": bool(pc < alpha) if not np.isnan(pc) else False})
    return pd.DataFrame(rows, columns=["corpus", "size", "model", "leakage", "column", "mean", "std", "seeds",
                                       "topics", "p", "p_bonferroni", "paired_topics", "significant"])


def column_order(s: Settings) -> list[str]:
    return ([s.measure, "VNAP"] + [f"worst {round(f * 100):g}%" for f in s.worst] + ["DR_OOD"]
            + [f"DR {a}" for a in s.query_attacks]
            + [f"{m} {k}" for k in s.doc_manipulations for m in ("TC", "KT")])


def wide_table(long: pd.DataFrame, s: Settings, models: list[str]) -> pd.DataFrame:
    """One row per (model, [size,] leakage); cells "0.123" with † where the paired test against None is
    significant; "–" where no value exists."""
    sizes = sorted(long["size"].unique())
    cols = [c for c in column_order(s) if c in set(long.column)]
    rows = []
    present = [m for m in models if m in set(long.model)] + sorted(set(long.model) - set(models))
    for model in present:
        for size in sizes:
            for leakage in ("none", "msm", "test"):
                sub = long[(long.model == model) & (long["size"] == size) & (long.leakage == leakage)]
                if sub.empty:
                    continue
                row = {"Model": _model_label(model)}
                if len(sizes) > 1:
                    row["Size"] = str(size)
                row["Leakage"] = LEAKAGE_LABEL.get(leakage, leakage)
                by = sub.set_index("column")
                for c in cols:
                    if c not in by.index or pd.isna(by.at[c, "mean"]):
                        row[c] = "–"
                        continue
                    text = f"{by.at[c, 'mean']:.3f}"
                    if not pd.isna(by.at[c, "std"]):
                        text += f" ± {by.at[c, 'std']:.3f}"
                    row[c] = text + ("†" if by.at[c, "significant"] else "")
                rows.append(row)
    return pd.DataFrame(rows)


def _model_label(m: str) -> str:
    from leakexp.tables import MODEL_LABEL

    return MODEL_LABEL.get(m, m)


def brittleness_notes(long: pd.DataFrame, s: Settings) -> list[str]:
    """The answer the table gives to "does leakage make a model more brittle?": per leaked type, in how many
    (model, attack) pairs DR_query is lower (a larger drop) than without leakage, and how many significantly;
    the same for the document manipulations' KT."""
    notes = []
    for leakage in ("msm", "test"):
        for prefix, what, worse in (("DR ", "DR_query (query attacks)", "lower"),
                                    ("KT ", "KT (document manipulations)", "higher")):
            lower = sig = total = 0
            for (model, size, col), g in long[long.column.str.startswith(prefix)].groupby(["model", "size", "column"]):
                x = g.set_index("leakage")["mean"]
                if leakage not in x.index or "none" not in x.index or pd.isna(x[leakage]) or pd.isna(x["none"]):
                    continue
                total += 1
                brittle = x[leakage] < x["none"] if worse == "lower" else x[leakage] > x["none"]
                lower += int(brittle)
                sig += int(brittle and bool(g.set_index("leakage").at[leakage, "significant"]))
            if total:
                notes.append(f"{LEAKAGE_LABEL[leakage]} leakage, {what}: {worse} than without leakage (more brittle) "
                             f"in {lower} of {total} (model, {'attack' if prefix == 'DR ' else 'manipulation'}) pairs, "
                             f"significantly in {sig}")
    return notes


def figure(long: pd.DataFrame, s: Settings, models: list[str], out: Path, caption: str) -> Path | None:
    """DR_query by leakage type per model: one panel per (corpus, attack), bars None / MSM / Test, error bars
    = standard deviation over seeds. PNG, with the plotted values as CSV."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dr = long[long.column.str.startswith("DR ") & (long.column != "DR_OOD")]
    if dr.empty:
        return None
    corpora = list(dict.fromkeys(dr.corpus))
    cols = [c for c in column_order(s) if c in set(dr.column)]
    present = [m for m in models if m in set(dr.model)] + sorted(set(dr.model) - set(models))
    fig, axes = plt.subplots(len(corpora), len(cols), figsize=(3.2 * len(cols) + 0.6, 2.8 * len(corpora)),
                             squeeze=False, sharey=True)
    x = np.arange(len(present))
    width = 0.27
    for r, corpus in enumerate(corpora):
        for c, col in enumerate(cols):
            ax = axes[r][c]
            sub = dr[(dr.corpus == corpus) & (dr.column == col)].groupby(["model", "leakage"])[["mean", "std"]].mean()
            for k, leakage in enumerate(("none", "msm", "test")):
                vals = [sub.at[(m, leakage), "mean"] if (m, leakage) in sub.index else np.nan for m in present]
                errs = [sub.at[(m, leakage), "std"] if (m, leakage) in sub.index else np.nan for m in present]
                ax.bar(x + (k - 1) * width, vals, width, yerr=np.nan_to_num(errs), label=LEAKAGE_LABEL[leakage])
            ax.axhline(0, color="black", lw=0.6)
            ax.set_xticks(x, [_model_label(m) for m in present], rotation=30, fontsize=7)
            ax.set_title(f"{corpus}: {col[3:]}", fontsize=8)
            if c == 0:
                ax.set_ylabel("DR_query")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    tmp = out / ".robustness_dr_query.tmp.png"
    fig.savefig(tmp, dpi=150)
    plt.close(fig)
    tmp.replace(out / "robustness_dr_query.png")
    atomic_write_text(out / "robustness_dr_query.csv", dr.to_csv(index=False))
    atomic_write_text(out / "robustness_dr_query.md",
                      f"**{caption}**\n\n![DR_query by leakage type](robustness_dr_query.png)\n")
    return out / "robustness_dr_query.png"


def _caption(s: Settings, corpus: str, seeds: int, alpha: float, depth: int) -> str:
    first = ("BM25 re-run with the attacked query (a user's typo reaches the whole system)" if s.first_stage == "bm25"
             else "the re-ranker re-scores the original BM25 pool for the attacked query (BM25 unchanged)")
    worst = ", ".join(f"worst {round(f * 100):g}%" for f in s.worst)
    manipulations = {"stuff": f"stuff = the query inserted {s.stuff_repeats} times into one document per topic from "
                              f"first-stage rank {s.stuff_from_rank + 1} down",
                     "noise": f"noise = one internal character edit in {s.noise_rate:.0%} of the words of every "
                              "document"}
    described = "; ".join(manipulations[k] for k in s.doc_manipulations) or "none configured"
    ood = ", ".join(c for c in s.ood if c != corpus) if s.ood is not None else "the grid's other corpora"
    return (
        f"Robustness on {corpus} (Wu et al., Are Neural Ranking Models Robust?): per model and leakage type, mean "
        f"± standard deviation over {seeds} seed(s). {s.measure} on the {depth} re-ranked documents; VNAP = variance "
        f"over topics of AP(q) / MAP (Sec. 3.2; lower is more robust); {worst} = mean {s.measure} of the topics "
        f"worst for the model trained without leakage (Sec. 3.5); DR_OOD = (P_OOD - P_IID) / P_IID, the model "
        f"re-ranking the BM25 runs of {ood} (Sec. 4.2; topics pooled); DR <attack> = (P_attacked - P_original) / P_original "
        f"over the topics the attack changes (Sec. 5.1; higher = more robust), first stage: {first}; TC = share of "
        f"topics whose top document changes, KT = normalised Kendall-tau distance of the rankings before and after "
        f"the document manipulation (Sec. 5.2; lower = more robust; {described}). Attack seed {s.seed}. "
        f"† = Bonferroni-corrected "
        f"significant difference to None (paired Student's t-test over per-topic values, p < {alpha}); VNAP has no "
        f"per-topic value and no test."
    )


def write_tables(cfg: DictConfig, p: Pipeline, out_dir: Path, cells: list[Cell]) -> list[Path]:
    """The robustness table of every corpus (``robustness_<corpus>.{md,tex,csv}``), the DR_query figure, all
    per-topic values (``robustness_perquery.csv``) and the attacked queries and stuffed documents for reading
    (``robustness_queries_<corpus>.tsv``, ``robustness_documents_<corpus>.tsv``), from the stored artifacts
    only. Returns the files written; empty when no robustness artifact of ``cells`` is stored."""
    from leakexp.report import latex_table, markdown_table
    from leakexp.tables import incomplete_note

    s = settings(cfg)
    out_dir = Path(out_dir)
    values, states = stored_values(p, cells)
    if values.empty:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    alpha = float(cfg.evaluate.get("alpha", 0.05))
    long = robustness_frame(values, s, alpha)
    models = list(cfg.grid.models)
    written = [atomic_write_text(out_dir / "robustness_perquery.csv", values.to_csv(index=False))]
    for corpus in dict.fromkeys(c.corpus for c in cells):
        sub = long[long.corpus == corpus]
        if sub.empty:
            continue
        seeds = int(values[values.corpus == corpus].groupby(["leakage", "size", "model"]).seed.nunique().max())
        notes = brittleness_notes(sub, s)
        caption = _caption(s, corpus, seeds, alpha, int(cfg.rerank.depth))
        caption += " Does leakage make a model more brittle? " + (
            "; ".join(notes) + "." if notes else "no leaked model to compare.")
        caption += incomplete_note(states, corpus)
        wide = wide_table(sub, s, models)
        name = f"robustness_{corpus}"
        note_text = "\n".join(f"- {n}" for n in notes) or "- no leaked model to compare"
        written.append(atomic_write_text(out_dir / f"{name}.md", f"**{caption}**\n\n{markdown_table(wide)}\n"
                                         f"Does leakage make a model more brittle?\n{note_text}\n"))
        written.append(atomic_write_text(out_dir / f"{name}.tex", latex_table(wide, caption)))
        written.append(atomic_write_text(out_dir / f"{name}.csv", sub.to_csv(index=False)))
        stage = _Stage(p)
        queries = []
        for attack in s.query_attacks:
            path = stage.shared_path(corpus, "attacked-queries", attack, stage.queries_config(corpus, attack))
            if p.store.valid_marker(path) is not None:
                queries.append(pd.read_parquet(path / "attacks.parquet").assign(attack=attack))
        if queries:
            written.append(atomic_write_text(out_dir / f"robustness_queries_{corpus}.tsv",
                                             pd.concat(queries).to_csv(sep="\t", index=False)))
        if "stuff" in s.doc_manipulations:
            path = stage.shared_path(corpus, "manipulated-docs", "stuff", stage.docs_config(corpus, "stuff"))
            if p.store.valid_marker(path) is not None:
                written.append(atomic_write_text(out_dir / f"robustness_documents_{corpus}.tsv",
                                                 (path / "documents.tsv").read_text()))
    fig = figure(long, s, models, out_dir,
                 f"DR_query by leakage type per model (data={cfg.data.name}; attack seed {s.seed}; first stage: "
                 f"{'BM25 re-run with the attacked query' if s.first_stage == 'bm25' else 'original BM25 pool'}); "
                 f"bars: mean over seeds, error bars: standard deviation over seeds. Higher (closer to 0) is more "
                 f"robust." + incomplete_note(states))
    if fig is not None:
        written.append(fig)
    return written
