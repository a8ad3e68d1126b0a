"""The toy world: a deterministic miniature of the study's real setting.

It writes, in seconds and without any download, the same kinds of files the real study reads: a training
pool of MS MARCO-like questions and ORCAS-like click queries, each with one relevant document, and three
test collections (robust-, core17- and core18-like) with TREC topics, at least eight query variants per
topic, graded qrels over a judged pool, and documents. The core-like collections reuse robust-like topics
(same qids) as the real Common Core tracks did. Each collection has its own style vocabulary; the training
documents share the newest (core18-like) style, so a time gap between training and test data is simulated.

Leaks are planted for about 70 % of the test themes: training queries that are identical to the topic
title, a generalization, a specialization or a reformulation of it, plus lexically close queries on a
different topic (decoys). ``truth/leaks.tsv`` keeps the ground truth so the toy world can play the
manual annotators.

The real data's hazards are planted on purpose, so that the demo and the tests meet them before a real run
does (docs/design.md, "The real data's hazards"): a robust topic without any relevant judgment (as Robust04 topic 672) and one
with a single relevant document; documents longer than 512 subword tokens and than Capreolus' 800-token
``maxdoclen``; an empty document in a test collection and in the training pool; ORCAS queries whose ids are
also MS MARCO query ids, with other texts and other judgments (so the training judgments come per source);
a core18 topic that reuses a robust topic id with another text; a training query that leaks for two topics
(Robust04's "industrial espionage", the title of topic 311 and, through the variant "technology espionage", the
only leak of topic 389); accents and curly quotes in topics, queries and documents.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

from leakexp.data.files import write_docs_jsonl, write_qrels, write_trec_topics
from leakexp.data.lexicon import BACKGROUND_THEMES, TEST_THEMES
from leakexp.data.types import Topic

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


LEAK_TYPES = ("Identical", "Specialization", "Generalization", "Reformulation")
DECOY = "Different Topic"

GENERAL_WORDS = (
    "the of and to in a is that for on with as was by at from it said new year people also more after "
    "first about some many other which when their been were has have this these most could would report "
    "time last week group area number local major part public state world"
).split()

STYLES = {
    "train": "online website posted blog click review updated app share guide tips video it’s",
    "robust": "ministry bureau dispatch telex communiqué soviet correspondent officials reported agency",
    "core17": "newspaper editor’s column city times reporters weekly edition readers metro",
    "core18": "online posted digital website updated social video streaming app share",
}

# Which test themes (indices into TEST_THEMES) each collection uses; core17 reuses robust topics only,
# core18 reuses some and adds new ones, as the real Common Core tracks did.
COLLECTIONS = {
    "robust": {"themes": list(range(0, 30)), "qid_base": 301, "docno": "FBIS{:06d}", "background_docs": 500,
               "distractors_per_topic": 40},
    "core17": {"themes": list(range(0, 12)), "qid_base": 301, "docno": "NYT{:07d}", "background_docs": 300,
               "distractors_per_topic": 40},
    "core18": {
        "themes": list(range(12, 18)) + list(range(30, 36)),
        "qid_base": 301,
        "docno": "WAPO-{:06d}",
        "background_docs": 300,
        "distractors_per_topic": 40,
    },
}
NEW_TOPIC_QID_BASE = 801

# The real data's hazards (theme indices into TEST_THEMES; robust topic ids are 301 + index).
NO_RELEVANT_THEME = 25  # robust topic 326: judged documents, none of them relevant (Robust04 topic 672)
SINGLE_RELEVANT_THEME = 26  # robust topic 327: exactly one relevant document
EMPTY_DOC_THEME = 27  # robust topic 328: two judged non-relevant documents, one of them empty
REUSED_QIDS = {30: "330"}  # core18's first new topic takes robust topic 330's id, with another text
LONG_DOC_WORDS = (850, 950)  # > 512 WordPiece / SentencePiece tokens (each word is >= 1) and > 800 words
LONG_DOC_TOPICS = 2  # the first topics of each collection (and topic 327) get a long highly relevant document
LONG_TRAIN_DOC_EVERY = 250  # every 250th training query's relevant document is long
SHARED_QID_EVERY = 20  # every 20th ORCAS query carries the id of an MS MARCO query (another text)
# A query that leaks for two topics: robust topic 323 ("counterfeit currency") gets topic 311's title ("stolen art
# recovery") as an expert variant, so 311's title-identical queries are leaks of 323 too (its only ones with the
# default seed), as Robust04 389's variant "technology espionage" makes 311's "industrial espionage" a leak of 389.
# Theme 10 always leaks; neither choice draws from the generator's random stream (the rest of the world is unchanged).
DOUBLE_LEAK = (10, 22)  # (theme whose identical queries leak twice, theme that gets its title as a variant)
DOUBLE_LEAK_TYPE = "Generalization"  # the study's annotators: 389 is Title-Generalization of "industrial espionage"


@dataclass(frozen=True)
class Theme:
    title: str
    words: tuple[str, ...]
    generalization: str = ""
    reformulation: str = ""
    decoy: str = ""


def parse_themes() -> tuple[list[Theme], list[Theme]]:
    test = []
    for line in TEST_THEMES.strip().splitlines():
        title, gen, reform, decoy, words = line.split("|")
        test.append(Theme(title, tuple(words.split()), gen, reform, decoy))
    background = []
    for line in BACKGROUND_THEMES.strip().splitlines():
        title, words = line.split("|")
        background.append(Theme(title, tuple(words.split())))
    return test, background


def theme_qid(index: int) -> str:
    """Test themes 0-29 are robust topics 301-330; later ones are new core18 topics from 801, except those
    that reuse a robust id (``REUSED_QIDS``)."""
    if index in REUSED_QIDS:
        return REUSED_QIDS[index]
    return str(301 + index) if index < 30 else str(NEW_TOPIC_QID_BASE + index - 30)


class _Writer:
    """Random text in a collection's style, seeded once."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def doc(self, focus: list[str], pool: list[str], style: str, n: int, focus_repeat=(1, 3)) -> str:
        rng = self.rng
        style_words = STYLES[style].split()
        words = []
        for _ in range(n):
            r = rng.random()
            if r < 0.35 and pool:
                words.append(rng.choice(pool))
            elif r < 0.5:
                words.append(rng.choice(style_words))
            else:
                words.append(rng.choice(GENERAL_WORDS))
        for w in focus:
            for _ in range(rng.randint(*focus_repeat)):
                words.insert(rng.randrange(len(words) + 1), w)
        sentences, i = [], 0
        while i < len(words):
            k = rng.randint(8, 16)
            s = " ".join(words[i : i + k])
            sentences.append(s[:1].upper() + s[1:] + ".")
            i += k
        return " ".join(sentences)


def _variants(theme: Theme, rng: random.Random, n: int = 9) -> list[str]:
    w = list(theme.words)
    rng.shuffle(w)
    t = theme.title
    candidates = [
        f"{t} {w[0]}",
        f"{w[1]} {t}",
        f"{theme.generalization} {w[2]}",
        theme.reformulation,
        f"{t} {w[3]} {w[4]}",
        f"{w[5]} {theme.generalization}",
        f"{theme.reformulation} {w[6]}",
        " ".join(reversed(t.split())) + f" {w[7]}",
        f"{t} and {w[8]}",
        f"{w[9]} of {theme.generalization}",
    ]
    out = []
    for c in candidates:
        if c not in out:
            out.append(c)
    return out[: max(n, 8)]


def _msmarco_form(text: str, rng: random.Random) -> str:
    return rng.choice(["what is {}", "what are {}", "{} definition", "how does {} work", "facts about {}",
                       "what’s {}"]).format(text)


def _leak_queries(theme: Theme, rng: random.Random) -> list[tuple[str, str]]:
    """(query text, type) pairs for one leaking theme; the form is still source-neutral."""
    t, words = theme.title, list(theme.words)
    out = []
    tw = t.split()
    identical = [t, " ".join(reversed(tw)) if len(tw) > 1 else t + "s"]
    for _ in range(rng.randint(1, 3)):
        out.append((rng.choice(identical), "Identical"))
    for w in rng.sample(words, rng.randint(1, 3)):
        out.append((rng.choice([f"{t} {w}", f"{w} {t}"]), "Specialization"))
    if theme.generalization and rng.random() < 0.6:
        out.append((theme.generalization, "Generalization"))
    for _ in range(rng.randint(1, 2)):
        out.append((rng.choice([theme.reformulation, f"{theme.reformulation} {rng.choice(words)}"]), "Reformulation"))
    return out


def generate(
    out: str | Path,
    *,
    seed: int = 42,
    queries_per_source: int = 2000,
    leak_fraction: float = 0.7,
    doc_words: tuple[int, int] = (60, 120),
) -> dict:
    """Write the toy world under ``out`` and return key figures. Same seed, same bytes."""
    import pandas as pd

    out = Path(out)
    rng = random.Random(seed)
    writer = _Writer(rng)
    test_themes, background = parse_themes()

    # -- test collections ------------------------------------------------------------------------------
    used = sorted({i for c in COLLECTIONS.values() for i in c["themes"]})
    topics = {}
    for i in used:
        th = test_themes[i]
        w = list(th.words)
        topics[i] = Topic(
            qid=theme_qid(i),
            title=th.title,
            description=f"Find information on “{th.title}”, in particular {w[0]}, {w[1]} or {w[2]}.",
            narrative=(
                f"A relevant document discusses ‘{th.title}’ and mentions {w[3]} or {w[4]}. "
                f"Documents about {th.decoy} aren’t relevant."
            ),
            variants=tuple(_variants(th, rng))
            + ((test_themes[DOUBLE_LEAK[0]].title,) if i == DOUBLE_LEAK[1] else ()),
        )
    figures: dict = {"collections": {}, "hazards": {"long_docs": {}, "empty_docs": {}}}
    for cname, spec in COLLECTIONS.items():
        cdir = out / cname
        cdir.mkdir(parents=True, exist_ok=True)
        docs, qrels = [], []

        def add(text: str) -> int:
            docs.append(text)
            return len(docs) - 1

        judged = []  # (theme index, doc index, label)
        long_docs, empty_docs = [], []
        for n_topic, i in enumerate(spec["themes"]):
            th = test_themes[i]
            title_words = th.title.split()
            pool = list(th.words)
            robust = cname == "robust"
            n_high, n_rel = rng.randint(3, 5), rng.randint(3, 5)
            if robust and i == NO_RELEVANT_THEME:
                n_high = n_rel = 0
            elif robust and i == SINGLE_RELEVANT_THEME:
                n_high, n_rel = 1, 0
            # highly relevant: on topic throughout, the title mentioned a few times
            for k in range(n_high):
                # a long document, truncated by every re-ranker; the single relevant one of its topic is long too,
                # so every test-leakage set of the robust collection trains on it
                if k == 0 and (n_topic < LONG_DOC_TOPICS or (robust and i == SINGLE_RELEVANT_THEME)):
                    long_docs.append(add(writer.doc(title_words, pool, cname, rng.randint(*LONG_DOC_WORDS), (4, 8))))
                    judged.append((i, long_docs[-1], 2))
                    continue
                judged.append((i, add(writer.doc(title_words, pool, cname, rng.randint(*doc_words), (1, 3))), 2))
            # relevant: on topic, one title word
            for _ in range(n_rel):
                focus = [rng.choice(title_words)] + rng.sample(pool, 2)
                judged.append((i, add(writer.doc(focus, pool[:6], cname, rng.randint(*doc_words), (1, 1))), 1))
            # judged non-relevant: the title's words in a text about something else, or the decoy topic
            n_non = 2 if robust and i == EMPTY_DOC_THEME else rng.randint(6, 10)
            for k in range(n_non):
                if robust and i == EMPTY_DOC_THEME and k == 0:  # an empty document, judged non-relevant
                    empty_docs.append(add(""))
                    judged.append((i, empty_docs[-1], 0))
                    continue
                other = rng.choice(background)
                focus = th.decoy.split() + [rng.choice(title_words)] if rng.random() < 0.3 else title_words
                judged.append((i, add(writer.doc(focus, list(other.words), cname, rng.randint(*doc_words), (1, 2))), 0))
            # unjudged documents that mention a title word in passing: they fill the BM25 top-100
            for _ in range(spec["distractors_per_topic"]):
                other = rng.choice(background)
                add(writer.doc([rng.choice(title_words)], list(other.words), cname, rng.randint(*doc_words), (1, 2)))
        for _ in range(spec["background_docs"]):
            th = rng.choice(background)
            add(writer.doc([], list(th.words), cname, rng.randint(*doc_words)))
        numbers = rng.sample(range(10**5, 10**6 - 1), len(docs))  # random docnos: tie order != relevance
        docnos = [spec["docno"].format(n) for n in numbers]
        for i, d, label in judged:
            qrels.append((theme_qid(i), docnos[d], label))
        order = sorted(range(len(docs)), key=lambda k: docnos[k])
        write_docs_jsonl(cdir / "docs.jsonl", ((docnos[k], docs[k]) for k in order))
        write_qrels(cdir / "qrels.txt", pd.DataFrame(qrels, columns=["qid", "docno", "label"]))
        ctopics = [topics[i] for i in spec["themes"]]
        write_trec_topics(cdir / "topics.txt", ctopics)
        with open(cdir / "variants.tsv", "w", encoding="utf-8") as f:
            for t in ctopics:
                for v in t.variants:
                    f.write(f"{t.qid}\t{v}\n")
        figures["collections"][cname] = {"topics": len(ctopics), "docs": len(docs), "qrels": len(qrels)}
        figures["hazards"]["long_docs"][cname] = sorted(docnos[d] for d in long_docs)
        figures["hazards"]["empty_docs"][cname] = sorted(docnos[d] for d in empty_docs)

    # -- training pool ----------------------------------------------------------------------------------
    # both topics that share id 330 leak, so that leak attribution must tell their texts apart
    forced = {i for i in used if theme_qid(i) in REUSED_QIDS.values()}
    others = [i for i in used if i not in forced]
    leaking = sorted(forced | set(rng.sample(others, max(round(leak_fraction * len(used)) - len(forced), 0)))
                     | {DOUBLE_LEAK[0]})
    planned: list[tuple[str, str, int, str]] = []  # (text, source, theme index or -1, type)
    seen: set[tuple[str, str]] = set()

    def plan(text: str, source: str, i: int, kind: str) -> bool:
        if source == "msmarco":
            text = _msmarco_form(text, rng)
        if (text, source) in seen:
            return False
        seen.add((text, source))
        planned.append((text, source, i, kind))
        return True

    for i in leaking:
        for text, kind in _leak_queries(test_themes[i], rng):
            plan(text, "orcas" if rng.random() < 0.75 else "msmarco", i, kind)
    for i in used:
        th = test_themes[i]
        if rng.random() < 0.6:
            plan(th.decoy, rng.choice(["orcas", "msmarco"]), i, DECOY)
        for _ in range(rng.randint(2, 4)):  # same domain, different need: not a leak
            plan(" ".join(rng.sample(th.words, 2)), rng.choice(["orcas", "msmarco"]), i, "Other")
    for source in ("msmarco", "orcas"):
        count = sum(p[1] == source for p in planned)
        while count < queries_per_source:
            b = rng.randrange(len(background))
            th = background[b]
            k = rng.randint(1, 3)
            text = " ".join(rng.sample(list(th.words), k)) if rng.random() < 0.7 else f"{th.title} {rng.choice(th.words)}"
            count += plan(text, source, -1 - b, "Background")  # negative index: a background theme

    queries, train_docs, train_qrels, truth = [], [], [], []
    qid_numbers = {"msmarco": rng.sample(range(10**6, 2 * 10**6), len(planned)),
                   "orcas": rng.sample(range(10**7, 2 * 10**7), len(planned))}
    doc_numbers = rng.sample(range(10**6, 10**7), len(planned))
    msmarco_ids = [str(qid_numbers["msmarco"][n]) for n, p in enumerate(planned) if p[1] == "msmarco"]
    n_orcas, shared, empty_doc = 0, [], None
    for n, (text, source, i, kind) in enumerate(planned):
        qid = str(qid_numbers[source][n])
        if source == "orcas":  # every SHARED_QID_EVERY-th ORCAS query reuses an MS MARCO id
            if n_orcas % SHARED_QID_EVERY == 0 and len(shared) < len(msmarco_ids):
                qid = msmarco_ids[len(shared)]
                shared.append(qid)
            n_orcas += 1
        docno = f"D{doc_numbers[n]}"
        theme = test_themes[i] if i >= 0 else background[-1 - i]
        # a relevant document is about the query's own theme (a decoy's theme is some other one)
        pool = list(theme.words) if kind != DECOY else list(rng.choice(background).words)
        focus = [w for w in text.split() if w not in ("what", "is", "are", "how", "does", "work", "facts", "about",
                                                        "definition", "what’s")]
        if empty_doc is None and kind == "Background":  # one training query's relevant document is empty
            empty_doc = docno
            train_docs.append((docno, ""))
        else:
            length = LONG_DOC_WORDS if n % LONG_TRAIN_DOC_EVERY == LONG_TRAIN_DOC_EVERY - 1 else doc_words
            train_docs.append((docno, writer.doc(focus, pool, "train", rng.randint(*length), (2, 3))))
        queries.append((qid, text, source))
        train_qrels.append((source, qid, docno, 1))
        if i >= 0 and kind in LEAK_TYPES + (DECOY,):
            truth.append((qid, source, theme_qid(i), kind))
        if i == DOUBLE_LEAK[0] and kind == "Identical":  # the same query, a leak of the second topic too
            truth.append((qid, source, theme_qid(DOUBLE_LEAK[1]), DOUBLE_LEAK_TYPE))

    tdir = out / "train"
    tdir.mkdir(parents=True, exist_ok=True)
    for source in ("msmarco", "orcas"):
        with open(tdir / f"{source}.queries.tsv", "w", encoding="utf-8") as f:
            for qid, text, s in queries:
                if s == source:
                    f.write(f"{qid}\t{text}\n")
    qrels_frame = pd.DataFrame(train_qrels, columns=["source", "qid", "docno", "label"])
    for source in ("msmarco", "orcas"):  # per source: an id may name different queries in the two sources
        write_qrels(tdir / f"{source}.qrels.txt", qrels_frame[qrels_frame.source == source])
    write_docs_jsonl(tdir / "docs.jsonl", sorted(train_docs))
    (out / "truth").mkdir(exist_ok=True)
    pd.DataFrame(truth, columns=["train_qid", "source", "topic_qid", "type"]).to_csv(
        out / "truth" / "leaks.tsv", sep="\t", index=False
    )
    figures["train"] = {
        "queries": len(queries),
        "msmarco": sum(q[2] == "msmarco" for q in queries),
        "orcas": sum(q[2] == "orcas" for q in queries),
        "planted_leaks": sum(t[3] in LEAK_TYPES for t in truth),
        "decoys": sum(t[3] == DECOY for t in truth),
        "leaking_topics": len(leaking),
        "shared_qids": len(shared),
        "empty_doc": empty_doc,
    }
    figures["hazards"].update({
        "no_relevant_topic": theme_qid(NO_RELEVANT_THEME), "single_relevant_topic": theme_qid(SINGLE_RELEVANT_THEME),
        "reused_topic_ids": sorted(REUSED_QIDS.values()), "shared_train_qids": len(shared),
        "double_leak_topics": [theme_qid(i) for i in DOUBLE_LEAK],
        "train_empty_doc": empty_doc,
    })
    return figures
