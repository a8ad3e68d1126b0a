"""The shared inputs of the robustness parts (``leakexp.stages.robustness.parts``): a corpus's test queries under one
seeded query attack with the first-stage pool the re-rankers score for them, and a corpus's documents under one
seeded manipulation (query stuffing or character noise). Every model of a corpus meets the same ones, so leaked and
unleaked models can be compared topic by topic. The attacks and manipulations are ``leakexp.toolkit.attacks``'."""

from __future__ import annotations

from pathlib import Path

from leakexp.runner.stage import Ask, Config, Context, register_stage
from leakexp.lib.bm25 import bm25_search
from leakexp.runner.store import file_digest
from leakexp.stages.robustness.family import DOCS, QUERIES, Robustness
from leakexp.toolkit import attacks

WORDLIST_KEY = {"word-synonym": "synonyms", "word-misspell": "misspellings"}  # the one list each word attack reads


def wordlist_file(name: str, value: str) -> Path:
    """The file of word list ``name`` (synonyms, misspellings) that config value ``value`` names."""
    return attacks.bundled_wordlist(name) if str(value) == "bundled" else Path(str(value))


@register_stage
class AttackedQueries(Robustness):
    """a corpus's test queries under one seeded query attack, and the first-stage pool for them"""

    name, version = QUERIES, 1

    def reads(self, p: dict, cuda: bool) -> list[str]:
        reads = ["robustness.seed", "rerank.query_field"]
        if p["attack"] in WORDLIST_KEY:
            reads.append(f"robustness.{WORDLIST_KEY[p['attack']]}")
        if p["first_stage"] == "bm25":  # BM25 re-run with the attacked query (its analysis is the index's)
            reads += ["rerank.depth", "bm25.k1", "bm25.b"]
        return reads

    def inputs(self, p: dict, c: Config) -> dict:
        inputs = {"topics": Ask.of("collection", corpus=p["corpus"])}
        if p["first_stage"] == "bm25":
            inputs["index"] = Ask.of("index", name=p["corpus"])
        else:
            inputs["run"] = Ask.of("firststage", corpus=p["corpus"])
        return inputs

    def external(self, p: dict, c: Config):
        """The content of the word list the attack reads (not its path or time): an edited list redoes the attack."""
        name = WORDLIST_KEY.get(p["attack"])
        if name is None:
            return None
        return {name: file_digest(wordlist_file(name, getattr(c.settings("robustness"), name)))}

    def path(self, p: dict, c: Config) -> list:
        return [p["corpus"], p["attack"], p["first_stage"]]

    def compute(self, ctx: Context, tmp: Path) -> dict:
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
            bm25 = ctx.settings("bm25")
            pool = bm25_search(ctx.inputs["index"], applied, depth=ctx.settings("rerank").depth, k1=bm25.k1, b=bm25.b,
                               threads=ctx.runtime.threads, verbose=ctx.runtime.verbose)
        else:
            run = ctx.inputs["run"]
            pool = run[run.qid.isin(set(applied.qid))].drop(columns="query").merge(applied, on="qid")
            pool = pool[["qid", "query", "docno", "score", "rank"]]
        att.to_parquet(tmp / "attacks.parquet", index=False)
        (tmp / "attacks.tsv").write_text(att.to_csv(sep="\t", index=False), encoding="utf-8")
        pool.reset_index(drop=True).to_parquet(tmp / "pool.parquet", index=False)
        return {"topics": len(att), "applied": int(att.applied.sum()), "pool_rows": len(pool)}


@register_stage
class ManipulatedDocs(Robustness):
    """a corpus's documents under one seeded manipulation (query stuffing or character noise)"""

    name, version = DOCS, 1

    def reads(self, p: dict, cuda: bool) -> list[str]:
        kind = attacks.check_manipulation(p["kind"])
        return ["robustness.seed", *(["robustness.stuff.repeats", "robustness.stuff.from_rank"] if kind == "stuff"
                                     else ["robustness.noise.rate"])]

    def inputs(self, p: dict, c: Config) -> dict:
        return {"run": Ask.of("firststage", corpus=p["corpus"]), "collection": Ask.of("collection", corpus=p["corpus"])}

    def path(self, p: dict, c: Config) -> list:
        return [p["corpus"], p["kind"]]

    def compute(self, ctx: Context, tmp: Path) -> dict:
        """``documents.tsv``/``.parquet``: stuffed documents (qid, docno, first_stage_rank, query, text), one per
        topic, or noisy documents (docno, edited_words, text) of every document in the corpus's first-stage pools."""
        r, run, docs = ctx.settings("robustness"), ctx.inputs["run"], ctx.inputs["collection"].docs
        if ctx.params["kind"] == "stuff":
            frame = attacks.stuffed_documents(run, docs, r.seed, r.stuff.repeats, r.stuff.from_rank)
        else:
            frame = attacks.noisy_documents(run, docs, r.seed, r.noise.rate)
        frame.to_parquet(tmp / "documents.parquet", index=False)
        (tmp / "documents.tsv").write_text(frame.to_csv(sep="\t", index=False), encoding="utf-8")
        return {"documents": len(frame)}
