"""Robustness of the trained re-rankers, with and without leakage (Wu et al., "Are Neural Ranking Models
Robust?", ACM TOIS 2022), and whether leakage makes a model more brittle.

Per grid cell (a trained model), each part is its own stage, keyed by what it reads (``ROBUSTNESS_STAGES``):

- ``robustness/own-corpus``: per-topic effectiveness (``robustness.measure``, nDCG@10), AP and P@10 of the cell's
  re-ranking of its own corpus (the RERANK artifact; the test corpus its training set was built for, Wu et al.'s
  P_I.I.D. though not an i.i.d. split) — VNAP (Section 3.2), %no and gMAP (Section 3.5.1, Eqs. 8-9);
- ``robustness/ood``: the same on the model's re-ranking of another corpus of the grid (the RERANK artifact
  ``rerank(..., target=T)``), each topic marked ``shared`` when the own corpus has it too (Core 2017 reuses
  Robust04's topics) — the OOD score per target and DR_OOD (Section 4.2.2, Eq. 11). A No-Leakage model's
  re-ranking of T is the very run the grid has for T, so nothing is re-ranked twice;
- ``robustness/query-attack``: the test titles under a seeded query attack (``leakexp.toolkit.attacks``), the original
  first-stage candidates re-scored for the attacked query (``robustness.first_stage: pool``, default, as Wu et
  al. keep the candidate list) or BM25 re-run with it (``bm25``: the first stage's brittleness mixed in) —
  DR_query (Section 5.1.2, Eq. 16);
- ``robustness/doc-manipulation``: rankings before and after manipulated documents — Top Change and the
  normalised Kendall-tau distance (Section 5.2.2, Eqs. 20-22), and for stuffing the stuffed document's rank gain
  and whether it is judged relevant.

Topics without a relevant judgment follow ``evaluate.no_relevant`` as in every other table.

Attacked queries (``robustness/attacked-queries/<corpus>/<attack>/<first stage>/``) and manipulated documents
(``robustness/manipulated-docs/<corpus>/<kind>/``, TSV for reading) are shared by every model of a corpus, so
leaked and unleaked models meet the same attacks and can be compared topic by topic. Only new scores are
computed: unattacked topics keep the stored run, a manipulation re-scores only the changed documents.

Tables and the figure are written by ``leakexp.tables.robustness`` from the finished artifacts.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Literal

import ir_measures
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from pydantic import Field

from leakexp.lib.measures import LOWER_IS_BETTER, per_query
from leakexp.lib.robustness_stats import (vnap, pct_no, shared_topics, drop_rate, strict_ranking, rescored_rankings, top_change, kendall_tau_distance)
from leakexp.runner.loop import each
from leakexp.runner.schema import Name, PositiveInt, Section, validate
from leakexp.runner.stage import Ask, Config, ConfigError, Context, Stage
from leakexp.runner.store import file_digest
from leakexp.stages.cell import Cell, grid_cells, rerank_params, rerank_path, train_params
from leakexp.stages.rerank import load_model, rerank, scoring
from leakexp.stages.train import reads_idf
from leakexp.toolkit import attacks

log = logging.getLogger(__name__)

FIRST_STAGES = ("pool", "bm25")
OOD_TOPICS = ("disjoint", "all")


def robustness_settings(cfg: DictConfig) -> "RobustnessSettings":
    """The robustness settings of ``cfg``: the section validated by its schema (:class:`RobustnessSettings`: every
    domain), then what only code can check (attack names, the measure, word lists), with ``sizes: largest`` resolved
    to the grid's largest size and the attacks by their canonical names (none: an empty list)."""
    r = cfg.get("robustness")
    if r is None:
        raise ConfigError("the config has no 'robustness' block; use leakexp's conf/config.yaml")
    v = validate("robustness", RobustnessSettings, OmegaConf.to_container(r, resolve=True))
    try:
        qa = tuple(attacks.check_attack(a) for a in v.query_attacks or [])
        dm = tuple(attacks.check_manipulation(d) for d in v.doc_manipulations or [])
    except attacks.AttackError as exc:
        raise ConfigError(f"robustness: {exc}") from None
    if v.measure in LOWER_IS_BETTER:
        raise ConfigError(f"robustness.measure={v.measure}: drop rates need a higher-is-better measure, e.g. nDCG@10")
    try:
        ir_measures.parse_measure(v.measure)
    except Exception:
        raise ConfigError(f"robustness.measure={v.measure!r} cannot be parsed; e.g. nDCG@10, AP, P@10") from None
    # the grid's largest size, whatever the grid (the demo's choice); corpora and sizes outside this grid are simply
    # not run (a narrowed grid keeps working), but their names must exist
    sizes = [max(int(x) for x in cfg.grid.sizes)] if v.sizes == "largest" else v.sizes
    for key, values in (("corpora", v.corpora), ("ood", v.ood)):
        bad = [x for x in values or [] if x not in list(cfg.data.corpora)]
        if bad:
            raise ConfigError(f"robustness.{key} has {bad[0]!r}, which is not in data.corpora="
                              f"{list(cfg.data.corpora)}; choose from those or null")
    for key in ("synonyms", "misspellings"):
        if getattr(v, key) != "bundled":
            try:
                attacks.load_wordlist(getattr(v, key))
            except attacks.AttackError as exc:
                raise ConfigError(f"robustness.{key}: {exc}") from None
    return v.model_copy(update={"sizes": None if sizes is None else [int(x) for x in sizes], "query_attacks": list(qa),
                                "doc_manipulations": list(dm)})


def robustness_cells(cfg: DictConfig) -> list[Cell]:
    """The grid cells that get robustness artifacts (``robustness.corpora`` / ``robustness.sizes``)."""
    s = robustness_settings(cfg)
    return [c for c in grid_cells(cfg) if (s.corpora is None or c.corpus in s.corpora)
            and (s.sizes is None or c.size in s.sizes)]




# =========================================================================================================
# The stages
# =========================================================================================================
QUERIES, DOCS = "robustness/attacked-queries", "robustness/manipulated-docs"
OWN, OOD, QUERY, DOC = ("robustness/own-corpus", "robustness/ood", "robustness/query-attack",
                        "robustness/doc-manipulation")
WORDLIST_KEY = {"word-synonym": "synonyms", "word-misspell": "misspellings"}  # the one list each word attack reads


def wordlist_file(name: str, value: str) -> Path:
    """The file of word list ``name`` (synonyms, misspellings) that config value ``value`` names."""
    return attacks.bundled_wordlist(name) if str(value) == "bundled" else Path(str(value))


# -- shared: attacked queries of a corpus ------------------------------------------------------------------
def _queries_reads(p: dict, cuda: bool) -> list[str]:
    reads = ["robustness.seed", "rerank.query_field"]
    if p["attack"] in WORDLIST_KEY:
        reads.append(f"robustness.{WORDLIST_KEY[p['attack']]}")
    if p["first_stage"] == "bm25":  # BM25 re-run with the attacked query (its analysis is the index's)
        reads += ["rerank.depth", "bm25.k1", "bm25.b"]
    return reads


def _queries_inputs(p: dict, c: Config) -> dict:
    inputs = {"topics": Ask.of("collection", corpus=p["corpus"])}
    if p["first_stage"] == "bm25":
        inputs["index"] = Ask.of("index", name=p["corpus"])
    else:
        inputs["run"] = Ask.of("firststage", corpus=p["corpus"])
    return inputs


def _wordlists_external(p: dict, c: Config):
    """The content of the word list the attack reads (not its path or time): an edited list redoes the attack."""
    name = WORDLIST_KEY.get(p["attack"])
    if name is None:
        return None
    return {name: file_digest(wordlist_file(name, c.at(f"robustness.{name}", "bundled")))}


def _attacked_queries(ctx: Context, tmp: Path) -> dict:
    """``attacks.tsv``/``.parquet`` (qid, original, attacked, applied, edits) and ``pool.parquet``: the candidates
    the re-ranker scores for the attacked topics (BM25 re-run with the attacked query, or the original pool)."""
    p, r = ctx.params, ctx.settings("robustness")
    attack = p["attack"]
    name = WORDLIST_KEY.get(attack)
    lists = {"synonyms": {}, "misspellings": {}}
    if name is not None:
        lists[name] = attacks.load_wordlist(wordlist_file(name, getattr(r, name)))
    topics = ctx.inputs["topics"].topics_frame(ctx.settings("rerank").query_field)
    att = attacks.attack_queries(topics, attack, r.seed, attacks.WordLists(**lists))
    applied = att[att.applied][["qid", "attacked"]].rename(columns={"attacked": "query"})
    if p["first_stage"] == "bm25":
        from leakexp.lib.bm25 import bm25_search

        bm25 = ctx.settings("bm25")
        pool = bm25_search(ctx.inputs["index"], applied, depth=ctx.settings("rerank").depth, k1=bm25.k1, b=bm25.b,
                           threads=int(ctx.runtime.get("threads", 2)), verbose=bool(ctx.runtime.get("verbose", False)))
    else:
        run = ctx.inputs["run"]
        pool = run[run.qid.isin(set(applied.qid))].drop(columns="query").merge(applied, on="qid")
        pool = pool[["qid", "query", "docno", "score", "rank"]]
    att.to_parquet(tmp / "attacks.parquet", index=False)
    (tmp / "attacks.tsv").write_text(att.to_csv(sep="\t", index=False), encoding="utf-8")
    pool.reset_index(drop=True).to_parquet(tmp / "pool.parquet", index=False)
    return {"topics": len(att), "applied": int(att.applied.sum()), "pool_rows": len(pool)}


ATTACKED_QUERIES = Stage(
    QUERIES, version=1, reads=_queries_reads, inputs=_queries_inputs, compute=_attacked_queries,
    external=_wordlists_external, path=lambda p, c: [p["corpus"], p["attack"], p["first_stage"]], check=robustness_settings,
    describe="a corpus's test queries under one seeded query attack, and the first-stage pool for them",
)


# -- shared: manipulated documents of a corpus ---------------------------------------------------------------
def _docs_reads(p: dict, cuda: bool) -> list[str]:
    kind = attacks.check_manipulation(p["kind"])
    return ["robustness.seed", *(["robustness.stuff.repeats", "robustness.stuff.from_rank"] if kind == "stuff"
                                 else ["robustness.noise.rate"])]


def _manipulated_docs(ctx: Context, tmp: Path) -> dict:
    """``documents.tsv``/``.parquet``: stuffed documents (qid, docno, first_stage_rank, query, text), one per
    topic, or noisy documents (docno, edited_words, text) of every document in the corpus's first-stage pools."""
    r, kind = ctx.settings("robustness"), ctx.params["kind"]
    seed = r.seed
    run, docs = ctx.inputs["run"], ctx.inputs["collection"].docs
    if kind == "stuff":
        repeats = r.stuff.repeats
        frame = attacks.stuffing_targets(run, r.stuff.from_rank, seed)
        frame["text"] = [attacks.stuff_document(docs[d], q, repeats, attacks.query_rng(seed, "stuff-text", str(qid)))
                         for qid, q, d in zip(frame.qid, frame["query"], frame.docno)]
    else:
        rate, rows = r.noise.rate, []
        for d in sorted(set(run.docno)):
            text, n = attacks.noise_document(docs[d], rate, attacks.query_rng(seed, "noise", str(d)))
            if n:
                rows.append({"docno": d, "edited_words": n, "text": text})
        frame = pd.DataFrame(rows, columns=["docno", "edited_words", "text"])
    frame.to_parquet(tmp / "documents.parquet", index=False)
    (tmp / "documents.tsv").write_text(frame.to_csv(sep="\t", index=False), encoding="utf-8")
    return {"documents": len(frame)}


MANIPULATED_DOCS = Stage(
    DOCS, version=1, reads=_docs_reads, compute=_manipulated_docs,
    inputs=lambda p, c: {"run": Ask.of("firststage", corpus=p["corpus"]),
                         "collection": Ask.of("collection", corpus=p["corpus"])},
    path=lambda p, c: [p["corpus"], p["kind"]],
    describe="a corpus's documents under one seeded manipulation (query stuffing or character noise)",
)


# -- per cell ----------------------------------------------------------------------------------------------
def _part_params(extra: str):
    """A part depends on the re-ranking (the model and the corpus it ranks) and on ``extra`` (attack, kind)."""
    return lambda p: {**rerank_params(p), extra: p[extra]}


def _part_path(p: dict, *extra: str) -> list[str]:
    return [*rerank_path(p), *extra]


def _values(ctx: Context, run: pd.DataFrame, measures: list[str]) -> pd.DataFrame:
    """Per-query values of ``run`` against the qrels of the ranked corpus, its topics handled as every other
    table handles them (``evaluate.no_relevant``: topics without a relevant judgment left out, or kept as 0);
    the measure is higher-is-better, never MFR, so depth and the MFR options play no part."""
    coll = ctx.inputs["collection"]
    return per_query(run, coll.qrels, measures, no_relevant=ctx.settings("evaluate").no_relevant,
                     topics=list(coll.topics))


def _own_measures(ctx: Context) -> list[str]:
    """The measure P, AP (VNAP, gMAP: Eqs. 5-7, 9) and P@10 (%no, Eq. 8), once each."""
    return list(dict.fromkeys([ctx.settings("robustness").measure, "AP", "P@10"]))


def _eval_inputs(p: dict, c: Config) -> dict:
    return {"run": Ask.of("rerank", **rerank_params(p)), "collection": Ask.of("collection", corpus=p["target"])}


def _own(ctx: Context, tmp: Path) -> dict:
    """The model on its own corpus's test topics (the corpus whose leaked queries a leaked model saw; Wu et al.'s
    P_I.I.D., though nothing here is an i.i.d. test split: the models are trained on MS MARCO / ORCAS)."""
    m = ctx.settings("robustness").measure
    pq = _values(ctx, pd.read_parquet(ctx.inputs["run"] / "run.parquet"), _own_measures(ctx))
    pq.to_parquet(tmp / "perquery.parquet", index=False)
    ap = pq[pq.measure == "AP"].value
    return {"mean": float(pq[pq.measure == m].value.mean()), "MAP": float(ap.mean()), "VNAP": vnap(ap),
            "%no": pct_no(pq[pq.measure == "P@10"].value)}


def _ood(ctx: Context, tmp: Path) -> dict:
    """The model on another corpus (P_OOD, Eq. 13), per topic, with ``shared``: whether the topic is also one of
    the source corpus's topics (:func:`shared_topics`; Core 2017 reuses Robust04's)."""
    res = pd.read_parquet(ctx.inputs["run"] / "run.parquet")
    pq = _values(ctx, res, _own_measures(ctx))
    field = ctx.settings("rerank").query_field
    shared = shared_topics(ctx.inputs["source"].topics_frame(field), ctx.inputs["collection"].topics_frame(field))
    pq["shared"] = pq.qid.astype(str).isin(shared)
    pq.to_parquet(tmp / "perquery.parquet", index=False)
    m = pq[pq.measure == ctx.settings("robustness").measure]
    return {"corpus": ctx.params["target"], "mean": float(m.value.mean()), "pairs": len(res),
            "shared_topics": int(m.shared.sum()), "disjoint_topics": int((~m.shared).sum()),
            "disjoint_mean": float(m[~m.shared].value.mean()) if (~m.shared).any() else None}


def _scoring_reads(p: dict, cuda: bool) -> list[str]:
    """What scoring with the cell's model reads: the model's config (whether it reads idf), bf16 on CUDA."""
    return ["models.{model}", "!models.{model}.train.score_batch_size"] + (["precision.rerank_bf16"] if cuda else [])


def _model_inputs(p: dict, c: Config) -> dict:
    """The re-ranking, the trained model, the ranked collection and (for models that read idf) its df table."""
    inputs = {**_eval_inputs(p, c), "model": Ask.of("train", **train_params(p))}
    if reads_idf(c, p["model"]):
        inputs["df"] = Ask.of("df", name=p["target"])
    return inputs


def _query_inputs(p: dict, c: Config) -> dict:
    queries = Ask.of(QUERIES, corpus=p["target"], attack=p["attack"],
                     first_stage=str(c.at("robustness.first_stage", "pool")))
    return {**_model_inputs(p, c), "queries": queries}


def _query(ctx: Context, tmp: Path) -> dict:
    run = pd.read_parquet(ctx.inputs["run"] / "run.parquet")
    shared = ctx.inputs["queries"]
    att = pd.read_parquet(shared / "attacks.parquet")
    pool = pd.read_parquet(shared / "pool.parquet")
    applied = set(att.qid[att.applied])
    new = (rerank(load_model(ctx), pool, ctx.inputs["collection"].docs, **scoring(ctx))
           if len(pool) else pool.iloc[0:0])
    new.to_parquet(tmp / "run.parquet", index=False)  # only the attacked topics: all others are unchanged
    attacked_run = pd.concat([new, run[~run.qid.isin(applied)]], ignore_index=True)
    m = ctx.settings("robustness").measure
    before = _values(ctx, run, [m]).set_index("qid").value
    after = _values(ctx, attacked_run, [m]).set_index("qid").value
    pq = pd.DataFrame({"qid": before.index, "applied": before.index.isin(applied),
                       "original": before.values, "attacked": after.reindex(before.index).values})
    pq.to_parquet(tmp / "perquery.parquet", index=False)
    a = pq[pq.applied]
    return {"applied": len(a), "scored_pairs": len(new),
            "original": float(a.original.mean()) if len(a) else None,
            "attacked": float(a.attacked.mean()) if len(a) else None,
            "DR_query": drop_rate(a.attacked.mean(), a.original.mean()) if len(a) else None}


def _doc(ctx: Context, tmp: Path) -> dict:
    kind = ctx.params["kind"]
    run = pd.read_parquet(ctx.inputs["run"] / "run.parquet")
    docs = ctx.inputs["collection"].docs
    manip = pd.read_parquet(ctx.inputs["docs"] / "documents.parquet")
    qrels = ctx.inputs["collection"].qrels
    relevant = set(zip(qrels.qid.astype(str)[qrels.label >= 1], qrels.docno.astype(str)[qrels.label >= 1]))
    # the (qid, docno) pairs to re-score: the stuffed document of each topic, or every noisy document
    if kind == "stuff":
        pairs = manip[["qid", "docno", "text"]].merge(run[["qid", "query", "docno"]], on=["qid", "docno"])
    else:
        pairs = run[["qid", "query", "docno"]].merge(manip[["docno", "text"]], on="docno")
    pairs = pairs.reset_index(drop=True)
    # original and manipulated text scored in one call, so that before and after differ only in the
    # manipulation (the other documents keep their stored scores)
    queries = pairs["query"].tolist()
    scores = load_model(ctx).score(queries * 2, [docs[d] for d in pairs.docno] + pairs.text.tolist(), **scoring(ctx))
    pairs["before"], pairs["after"] = scores[:len(pairs)], scores[len(pairs):]
    rows = []
    for qid, g in run.groupby("qid", sort=True):
        changed = pairs[pairs.qid == qid]
        if changed.empty:
            continue
        rb, ra = rescored_rankings(g, dict(zip(changed.docno, changed.before)), dict(zip(changed.docno, changed.after)))
        row = {"qid": qid, "documents": len(g), "manipulated": len(changed),
               "TC": top_change(rb, ra), "KT": kendall_tau_distance(rb, ra), "before_is_stored": rb == strict_ranking(g)}
        if kind == "stuff":
            d = str(changed.docno.iloc[0])
            row.update(docno=d, rank_before=rb.index(d), rank_after=ra.index(d), relevant=(str(qid), d) in relevant)
            row["gain"] = row["rank_before"] - row["rank_after"]
        rows.append(row)
    pq = pd.DataFrame(rows)
    pq.to_parquet(tmp / "perquery.parquet", index=False)
    out = {"topics": len(pq), "scored_pairs": 2 * len(pairs), "TC": float(pq.TC.mean()) if len(pq) else None,
           "KT": float(pq.KT.mean()) if len(pq) else None}
    if kind == "stuff" and len(pq):
        other = pq[~pq.relevant]
        out.update(relevant_targets=int(pq.relevant.sum()),
                   mean_gain=float(other.gain.mean()) if len(other) else None)
    return out


OWN_STAGE = Stage(
    OWN, version=2, reads=("robustness.measure", "evaluate.no_relevant"), inputs=_eval_inputs, compute=_own,
    normalise=rerank_params, path=lambda p, c: _part_path(p),
    describe="per-topic effectiveness, AP and P@10 of a cell's re-ranking of its own corpus (VNAP, %no, gMAP)",
)
OOD_STAGE = Stage(
    OOD, version=2, reads=("robustness.measure", "evaluate.no_relevant", "rerank.query_field"),
    inputs=lambda p, c: {**_eval_inputs(p, c), "source": Ask.of("collection", corpus=p["corpus"])},
    compute=_ood, normalise=lambda p: {**rerank_params(p), "corpus": p["corpus"]},
    path=lambda p, c: _part_path(p),
    describe="per-topic effectiveness of a model's re-ranking of another corpus, topics shared or not (OOD, DR_OOD)",
)
QUERY_STAGE = Stage(
    QUERY, version=2, reads=lambda p, cuda: ["robustness.measure", "robustness.first_stage", "evaluate.no_relevant",
                                             *_scoring_reads(p, cuda)],
    inputs=_query_inputs, compute=_query, normalise=_part_params("attack"),
    path=lambda p, c: _part_path(p, p["attack"]), device=True,
    describe="a cell's model re-ranking its corpus's attacked queries (DR_query)",
)
DOC_STAGE = Stage(
    DOC, version=2, reads=_scoring_reads, compute=_doc, normalise=_part_params("kind"),
    inputs=lambda p, c: {**_model_inputs(p, c), "docs": Ask.of(DOCS, corpus=p["target"], kind=p["kind"])},
    path=lambda p, c: _part_path(p, p["kind"]), device=True,
    describe="a cell's rankings before and after manipulated documents (Top Change, Kendall-tau distance)",
)

ROBUSTNESS_STAGES = (ATTACKED_QUERIES, MANIPULATED_DOCS, OWN_STAGE, OOD_STAGE, QUERY_STAGE, DOC_STAGE)


# =========================================================================================================
# Requests of a cell's robustness, and running them through a runner
# =========================================================================================================
def ood_targets(s: "RobustnessSettings", cfg: DictConfig, cell: Cell) -> list[str]:
    targets = s.ood if s.ood is not None else tuple(cfg.grid.corpora)
    return [c for c in dict.fromkeys(targets) if c != cell.corpus]


def asks(cfg: DictConfig, cell: Cell) -> dict[str, Ask]:
    """Every part of ``cell``'s robustness: part name (own, ood-<corpus>, <attack>, doc-<kind>) -> request."""
    s = robustness_settings(cfg)
    out = {"own": cell.ask(OWN)}
    out.update({f"ood-{t}": cell.ask(OOD, target=t) for t in ood_targets(s, cfg, cell)})
    out.update({a: cell.ask(QUERY, attack=a) for a in s.query_attacks})
    out.update({f"doc-{k}": cell.ask(DOC, kind=k) for k in s.doc_manipulations})
    return out


def queries_ask(cfg: DictConfig, corpus: str, attack: str) -> Ask:
    """The shared attacked queries of ``corpus`` under ``attack`` (with this config's first stage)."""
    return Ask.of(QUERIES, corpus=corpus, attack=attack, first_stage=robustness_settings(cfg).first_stage)


def docs_ask(corpus: str, kind: str) -> Ask:
    """The shared manipulated documents of ``corpus`` (``kind``: stuff or noise)."""
    return Ask.of(DOCS, corpus=corpus, kind=kind)


def robust(cfg: DictConfig, runner, cell: Cell) -> dict[str, Path]:
    """Compute (once) every robustness part of ``cell`` and everything it lacks upstream; part -> artifact."""
    return {name: runner.ensure(ask) for name, ask in asks(cfg, cell).items()}


def robust_all(cfg: DictConfig, runner, cells: list[Cell]) -> list[tuple[Cell, Exception]]:
    """``robust`` for every cell with a progress bar; a failing cell is logged and skipped. Returns failures."""
    return each(cells, lambda cell: robust(cfg, runner, cell), desc="robustness")


def cell_state(cfg: DictConfig, runner, cell: Cell) -> str:
    """done if every robustness part of the cell is done, else the first of failed, damaged, stale, running,
    missing among its parts. Computes nothing."""
    states = [runner.state(ask)[0] for ask in asks(cfg, cell).values()]
    for s in ("failed", "damaged", "stale", "running", "missing", "data missing"):
        if s in states:
            return s
    return "done"


class _Stuff(Section):
    repeats: PositiveInt
    from_rank: PositiveInt


class _Noise(Section):
    rate: Annotated[float, Field(gt=0, le=1)]


class RobustnessSettings(Section):
    """``robustness``: which cells, attacks and manipulations (attack names, the measure and word lists are checked
    further by :func:`robustness_settings`)."""

    enabled: bool
    corpora: list[Name] | None
    sizes: Annotated[list[PositiveInt], Field(min_length=1)] | Literal["largest"] | None
    ood: list[Name] | None
    ood_topics: Literal["disjoint", "all"]
    measure: Name
    gmap_epsilon: Annotated[float, Field(gt=0, lt=1)]
    worst: list[Annotated[float, Field(gt=0, le=1)]]
    bootstrap: Annotated[int, Field(ge=100)]  # resamples of the topics (at least 100 for a stable interval)
    seed: Annotated[int, Field(ge=0)]
    first_stage: Literal["bm25", "pool"]
    query_attacks: list[Name] | None
    doc_manipulations: list[Name] | None
    stuff: _Stuff
    noise: _Noise
    synonyms: Name
    misspellings: Name

    def files(self):
        return [(f"robustness.{k}", Path(getattr(self, k))) for k in ("synonyms", "misspellings")
                if getattr(self, k) != "bundled"]
