"""Leakage candidates as data: the topic fields a search compares, the candidates above (or near) the similarity
threshold, one leak pair per training query and topic, and the paper's Table 1 counts (Fröbe et al., SPIRE 2022,
Section 3). Every decision on a similarity is made on its rounded value (``leakexp.lib.decisions``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leakexp.data.types import Collection
from leakexp.lib.decisions import above, near, ranked

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


# corpora: the corpora ("|"-joined) whose topic has this text in this field; a topic id that two corpora use
# with different texts (the Common Core tracks reused Robust04 ids) is a different topic for each.
CANDIDATE_COLUMNS = ["train_qid", "source", "query", "topic_qid", "field", "variant_index", "similarity", "corpora"]


def topic_fields(collections: list[Collection], fields: list[str]) -> pd.DataFrame:
    """One row per (topic qid, field, text) with the corpora whose topic has it.

    A text that several corpora share for the same topic id and field is searched once; a topic id that a
    corpus reuses with another text (the Common Core tracks reused Robust04 ids) gets its own rows.
    """
    import pandas as pd

    rows: dict[tuple[str, str, str], list] = {}
    for c in collections:
        for t in c.topics.values():
            texts = []
            if "title" in fields and t.title:
                texts.append(("title", -1, t.title))
            if "description" in fields and t.description:
                texts.append(("description", -1, t.description))
            if "variant" in fields:
                texts.extend(("variant", i, v) for i, v in enumerate(t.variants))
            for field_name, index, text in texts:
                row = rows.setdefault((t.qid, field_name, text), [t.qid, field_name, index, text, []])
                if c.name not in row[4]:
                    row[4].append(c.name)
    out = [(*r[:4], "|".join(r[4])) for r in rows.values()]
    return pd.DataFrame(out, columns=["topic_qid", "field", "variant_index", "text", "corpora"])


def above_threshold(cands: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Candidates with similarity > threshold (the paper's 'score > 0.91'), decided on the similarity rounded as
    leakexp.lib.decisions says, so that another CPU's float noise keeps the same candidates."""
    return cands[above(cands.similarity, threshold)]


def near_threshold(cands: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Candidates within one rounding step of the threshold: another CPU could decide them otherwise."""
    return cands[near(cands.similarity, threshold)]


def leak_pairs(cands: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """One row per (training query, topic) above the threshold, with its best similarity and field, and (if
    the candidates name them) every corpus whose text of the topic is above the threshold. The order (topic, then
    rounded similarity, then source, query id, field and variant) and so the field kept for a query whose title and
    variant match equally do not depend on float noise."""
    ties = [c for c in ("source", "train_qid", "field", "variant_index") if c in cands.columns]
    hits = ranked(above_threshold(cands, threshold), "similarity", by=["topic_qid"], ties=ties)
    key = ["source", "train_qid", "topic_qid"]
    pairs = hits.drop_duplicates(key).reset_index(drop=True)
    if "corpora" in hits.columns and len(pairs):
        union = hits.groupby(key).corpora.agg(lambda s: "|".join(sorted(set("|".join(s).split("|")))))
        pairs["corpora"] = [union[k] for k in zip(pairs.source, pairs.train_qid, pairs.topic_qid)]
    return pairs


def in_corpus(corpora: pd.Series, corpus: str) -> pd.Series:
    """Whether each "|"-joined corpora value names ``corpus``."""
    return corpora.map(lambda s: corpus in str(s).split("|")).astype(bool)


def table1(cands: pd.DataFrame, corpora: dict[str, list[str]], threshold: float) -> pd.DataFrame:
    """Topics (T) and queries (Q) above the threshold per corpus, field, and source set (paper's Table 1)."""
    import pandas as pd

    hits = above_threshold(cands, threshold)
    rows = []
    for corpus, qids in corpora.items():
        h = hits[hits.topic_qid.isin(set(qids))]
        if "corpora" in h.columns:  # a reused topic id counts for the corpus whose text matched
            h = h[in_corpus(h.corpora, corpus)]
        for field_name, label in (("title", "Title"), ("description", "Description"), ("variant", "Variants"), (None, "Union")):
            f = h if field_name is None else h[h.field == field_name]
            for sources, slabel in ((("msmarco",), "MSM"), (("msmarco", "orcas"), "+ORC")):
                s = f[f.source.isin(sources)]
                rows.append({
                    "corpus": corpus, "field": label, "sources": slabel,
                    "T": s.topic_qid.nunique(), "Q": s[["source", "train_qid"]].drop_duplicates().shape[0],
                })
    return pd.DataFrame(rows)


def table1_wide(t: pd.DataFrame) -> pd.DataFrame:
    """Table 1 in the paper's layout: rows = field, columns = corpus x (MSM, +ORC) x (T, Q)."""
    import pandas as pd

    rows = []
    for field_name in ("Title", "Description", "Variants", "Union"):
        row = {"Candidates": field_name}
        for corpus in dict.fromkeys(t.corpus):
            for sources in ("MSM", "+ORC"):
                hit = t[(t.corpus == corpus) & (t.field == field_name) & (t.sources == sources)].iloc[0]
                row[f"{corpus} {sources} T"] = int(hit["T"])
                row[f"{corpus} {sources} Q"] = int(hit["Q"])
        rows.append(row)
    return pd.DataFrame(rows)
