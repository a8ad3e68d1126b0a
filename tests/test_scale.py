"""Real-scale CPU work done over arrays gives exactly what the one-at-a-time code gave: the training queries'
(positive, negative) pairs for the same seed, and the df table's bytes. The earlier implementations are kept here
as the references."""

import hashlib
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from leakexp.lib import training_sets as build
from leakexp.lib.training_sets import Negatives, build_set
from leakexp.models.capreolus import IdfTable
from leakexp.models.vectors import word_tokens
from leakexp.lib.seeded import draw_two, first_output, stable_seeds
from leakexp.runner.stage import Ask
from leakexp.runner.registry import runner


# -- the references: leakexp's code before the array versions ---------------------------------------------------
def ref_stable_rng(*parts) -> np.random.Generator:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


@dataclass
class RefNegatives:
    qrels: dict
    ranked: dict
    seed: int

    @classmethod
    def from_frames(cls, qrels: pd.DataFrame, run: pd.DataFrame, seed: int) -> "RefNegatives":
        rel = qrels.groupby(["source", "qid"]).docno.apply(lambda s: sorted(set(s))).to_dict()
        run = run.sort_values(["source", "qid", "rank"], kind="mergesort")
        ranked = run.groupby(["source", "qid"], sort=False).docno.apply(list).to_dict()
        return cls(rel, ranked, seed)

    def pair(self, source, qid):
        rel = self.qrels.get((source, qid))
        if not rel:
            return None
        rel_set = set(rel)
        negs = [d for d in self.ranked.get((source, qid), []) if d not in rel_set]
        if not negs:
            return None
        rng = ref_stable_rng(self.seed, "pair", source, qid)
        return rel[int(rng.integers(len(rel)))], negs[int(rng.integers(len(negs)))]


def ref_pairs_from_queries(queries, negatives, need, origin):
    out, skipped = [], 0
    for r in queries.itertuples(index=False):
        if len(out) == need:
            break
        p = negatives.pair(r.source, r.qid)
        if p is None:
            skipped += 1
            continue
        out.append((r.qid, r.text, r.source, p[0], p[1], origin))
    return out, skipped


def ref_df(texts) -> IdfTable:
    df, n = Counter(), 0
    for t in texts:
        df.update(set(word_tokens(t)))
        n += 1
    return IdfTable(dict(df), n)


# -- seeded draws -----------------------------------------------------------------------------------------------
def test_array_draws_equal_numpys_generator_seed_by_seed():
    rng = np.random.default_rng(5)
    n = 3000
    seeds = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, n, dtype=np.uint64)
    seeds[:5] = np.array([0, 1, 2**32 - 1, 2**32, 2**64 - 1], dtype=np.uint64)  # one-word and extreme entropies
    n1, n2 = rng.integers(1, 12, n), rng.integers(1, 300, n)
    n1[::3], n2[::7] = 1, 1  # integers(1) draws nothing: the second draw takes the first 32 bits
    n2[:40] = 2**31 + 11  # large bounds: numpy rejects often, the rejected seeds are redrawn by numpy
    a, b = draw_two(seeds, n1, n2)
    for s, x, y, da, db in zip(seeds, n1, n2, a, b):
        g = np.random.default_rng(int(s))
        assert (int(g.integers(int(x))), int(g.integers(int(y)))) == (int(da), int(db))
    raw = first_output(seeds[:50])
    assert [int(v) for v in raw] == [int(np.random.default_rng(int(s)).bit_generator.random_raw()) for s in seeds[:50]]
    keys = ["0:pair:msmarco:1", "7:pair:orcas:q é"]
    assert [int(s) for s in stable_seeds(keys)] == [
        int.from_bytes(hashlib.sha256(k.encode()).digest()[:8], "little") for k in keys]
    with pytest.raises(ValueError, match="n1, n2 >= 1"):
        draw_two(seeds[:2], [1, 0], [1, 1])


# -- negatives --------------------------------------------------------------------------------------------------
def random_frames(n_queries=6000, seed=3):
    """Training queries with the hazards: no qrels, no run, fewer candidates than relevant documents, every
    candidate relevant, duplicate docnos in a run and in the qrels, an id that both sources use, rank ties."""
    rng = np.random.default_rng(seed)
    queries = pd.DataFrame({"qid": [f"q{i // 2}" for i in range(n_queries)],
                            "source": np.where(np.arange(n_queries) % 2, "orcas", "msmarco")})
    queries["text"] = "query " + queries.qid
    docs = [f"D{i}" for i in range(400)]
    qrels, run = [], []
    for s, q in zip(queries.source, queries.qid):
        k = int(rng.choice([0, 1, 1, 2, 3]))  # a fifth of the queries have no qrels
        rel = list(rng.choice(docs, size=k))  # duplicates possible
        qrels += [(s, q, d) for d in rel + rel[:1]]  # a duplicate judgment row
        depth = int(rng.choice([0, 1, 2, 5, 30]))
        cands = list(rng.choice(docs, size=depth)) + rel[:1]  # duplicate docnos possible, the relevant one ranked
        ranks = rng.permutation(len(cands))
        ranks[: len(cands) // 4] = 0  # ties
        run += [(s, q, d, int(r)) for d, r in zip(cands, ranks)]
    qrels = pd.DataFrame(qrels, columns=["source", "qid", "docno"]).sample(frac=1, random_state=1)
    run = pd.DataFrame(run, columns=["source", "qid", "docno", "rank"]).sample(frac=1, random_state=2)
    # queries walked: every query, a few twice, a few unknown to both frames
    walk = pd.concat([queries, queries.iloc[:50],
                      pd.DataFrame({"qid": ["nowhere"], "source": ["orcas"], "text": ["x"]})], ignore_index=True)
    return qrels, run, walk.sample(frac=1, random_state=3).reset_index(drop=True)


@pytest.mark.parametrize("seed", [0, 42])
def test_vectorised_negatives_equal_the_per_query_reference_on_a_random_frame(seed):
    qrels, run, walk = random_frames()
    new, ref = Negatives.from_frames(qrels, run, seed), RefNegatives.from_frames(qrels, run, seed)
    assert new.qrels == ref.qrels and new.ranked == ref.ranked
    p = new.pairs(walk)
    expected = [ref.pair(s, q) for s, q in zip(walk.source, walk.qid)]
    got = [(a, b) if ok else None for a, b, ok in zip(p.pos, p.neg, p.ok)]
    assert got == expected
    kinds = Counter("none" if e is None else "pair" for e in expected)
    assert kinds["none"] > 500 and kinds["pair"] > 3000  # both kinds are exercised
    for need in (0, 1, 17, 2500, len(walk)):  # the last one: fewer usable queries than needed
        assert build._pairs_from_queries(walk, new, need, "filler") == ref_pairs_from_queries(walk, ref, need, "filler")
    assert new.pair("orcas", "nowhere") is None and ref.pair("orcas", "nowhere") is None


def test_negatives_of_empty_frames():
    empty_q = pd.DataFrame({"source": pd.Series([], dtype=str), "qid": pd.Series([], dtype=str),
                            "docno": pd.Series([], dtype=str)})
    neg = Negatives.from_frames(empty_q, empty_q.assign(rank=pd.Series([], dtype=int)), 0)
    assert neg.pair("msmarco", "1") is None
    walk = pd.DataFrame({"qid": ["1"], "text": ["t"], "source": ["msmarco"]})
    assert build._pairs_from_queries(walk, neg, 3, "filler") == ([], 1)


def test_toy_world_negatives_and_sets_equal_the_reference(small_cfg, monkeypatch):
    r = runner(small_cfg)
    pool, fillers = r.get(Ask.of("pool")), r.get(Ask.of("fillers"))
    leaks = r.get(Ask.of("leaks", corpus="toy_robust"))
    runs = pd.concat([r.get(Ask.of("negatives", part=p)) for p in ("0", "leaks")], ignore_index=True)
    seed = int(small_cfg.build.seed)
    new, ref = Negatives.from_frames(pool.qrels, runs, seed), RefNegatives.from_frames(pool.qrels, runs, seed)
    walk = pd.concat([fillers, leaks[["qid", "text", "source"]]], ignore_index=True)
    p = new.pairs(walk)
    assert [(a, b) if ok else None for a, b, ok in zip(p.pos, p.neg, p.ok)] == \
        [ref.pair(s, q) for s, q in zip(walk.source, walk.qid)]
    assert p.ok.sum() > 500

    def one_set(negatives, leakage):
        frame, manifest = build_set(corpus="toy_robust", leakage=leakage, size=256, fixed_queries=20,
                                    fillers=fillers, negatives=negatives, leaks=leaks, pool_docs=pool.docs, seed=seed)
        return frame, manifest["content_hash"]

    for leakage in ("none", "msm"):
        frame, digest = one_set(new, leakage)
        with monkeypatch.context() as m:
            m.setattr(build, "_pairs_from_queries", ref_pairs_from_queries)
            ref_frame, ref_digest = one_set(ref, leakage)
        assert digest == ref_digest
        pd.testing.assert_frame_equal(frame, ref_frame)


# -- the df table -----------------------------------------------------------------------------------------------
TRICKY = ["The Man's car; the man’s CARS", "3.5 U.S. e-mail don't", "", "   ", "Ünïcödé naïve CAFÉ café", "😀 emoji 👍🏽",
          "x" * 600 + "'s tail", "中文字符 日本語", "it's It'S ITS", "a.b.c 1,000,000 $5 @home #tag", "İstanbul ǅemal"]


def synthetic_docs(n, words=60, seed=0):
    rng = np.random.default_rng(seed)
    vocab = np.array(["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyzABC'"), size=k))
                      for k in rng.integers(1, 10, 3000)])
    zipf = 1 / np.arange(1, len(vocab) + 1)
    return [" ".join(rng.choice(vocab, size=words, p=zipf / zipf.sum())) + ". " + TRICKY[i % len(TRICKY)]
            for i in range(n)]


def test_df_table_equals_the_per_document_reference_byte_for_byte(tmp_path):
    texts = synthetic_docs(3000) + TRICKY
    ref = ref_df(texts)
    new = IdfTable.from_docs(texts, chunk=700)
    assert new == ref and new.n_docs == len(texts) and len(new) > 2000
    assert new.df["man"] == ref.df["man"] and new.df.get("") == ref.df.get("")
    # a small segment memo (cleared many times) and worker processes give the same table
    assert IdfTable.from_docs(iter(texts), chunk=300, processes=2, parallel_from=900) == ref
    a, b = new.save(tmp_path / "a.parquet"), ref.save(tmp_path / "b.parquet")
    assert a.read_bytes() == b.read_bytes()


def test_distinct_tokens_are_the_analyzers_sets_with_any_memo():
    from leakexp.models.vectors import distinct_tokens

    texts = TRICKY + synthetic_docs(200, seed=1)
    assert list(distinct_tokens(texts)) == [set(word_tokens(t)) for t in texts]
    memo = {}
    assert list(distinct_tokens(texts, memo=memo, memo_size=50)) == [set(word_tokens(t)) for t in texts]
    assert 0 < len(memo) <= 50 + max(len(set(word_tokens(t))) * 3 for t in texts)
