"""Seeded query attacks and document manipulations for the robustness stage (``leakexp.stages.robustness``).

Query attacks follow Wu et al., "Are Neural Ranking Models Robust?" (ACM TOIS 2022), Section 5.3.2
("Implementation of Query Attack"):

- character level (``char-<edit>-<n>``): one edit in each of ``n`` (1 or 2) distinct query words, on *internal*
  characters only (the first and last character of a word stay, after the psycholinguistic argument Wu et al.
  take from Pruthi et al. [70]): ``insert`` a lower-case letter, ``delete`` a character, ``substitute`` a
  character by another letter, ``swap`` two adjacent characters, or ``any`` (one of the four drawn at random
  per word, Wu et al.'s "1-char" / "2-char" queries). Wu et al.'s own code was announced but is not public;
  word eligibility follows the attack code of Pruthi et al. [70] (github.com/danishpruthi/Adversarial-Misspellings
  @07da742, ``attacks.py``: ``drop_one_attack``, l. 29-54, and ``add_one_attack``, l. 86-117, skip words shorter
  than 3 characters and stop words and edit positions ``1 .. len(word) - 1``; ``swap_one_attack``, l. 57-83, swaps
  ``word[i:i+2]`` for ``i in range(1, len(word) - 2)``; leakexp swaps in words of 4 letters or more where Pruthi
  et al. require ``MIN_LEN = 5``, l. 12, because the toy titles are short). Wu et al.'s 2-char attack may hit the
  same word twice; leakexp edits two distinct words, so that "exactly one character in each of two words" holds
  and can be checked.
- word level, as Wu et al. define it (Section 5.3.2, "Implementation of Query Attack"): ``word-add`` (Add:
  insert a new lower-case word, one the query lacks, drawn from :data:`VOCABULARY`, at a random position),
  ``word-delete`` (Remove: delete one content word, keeping one), ``word-substitute`` (Substitute: replace one
  content word by a random word of :data:`VOCABULARY`) and ``word-any`` (Wu et al.'s word-level attack: one of
  Add / Remove / Substitute drawn at random per query among those that apply).
- leakexp's own extras (not in Wu et al.): ``word-swap`` (swap two different words), ``word-synonym``
  (replace one word by a listed near-synonym, ``leakexp/data/synonyms.tsv``: a substitution that keeps the
  information need) and ``word-misspell`` (replace one word by a listed human misspelling,
  ``leakexp/data/misspellings.tsv``). :func:`defined_by_wu` says which attack is whose.

A query the attack cannot change (e.g. a one-word title for ``word-swap``) is kept and marked not applied.
Every draw comes from ``random.Random(f"{seed}:{attack}:{qid}")``: the same seed, attack and query always give
the same attacked query, whatever else runs in the process and in whatever order queries come.

Document manipulations (Section 5.2 measures them with ASRC's real manipulations, which have no counterpart
for the test collections here, so leakexp simulates two): ``stuff`` inserts the query ``repeats`` times at
random word positions of one lower-ranked document per topic (a promotion attempt, as ranking-incentivised
authors do, Section 5.2.1); ``noise`` applies a length-preserving internal character edit (substitute or swap)
to a fraction ``rate`` of the eligible words of every document of the pool (OCR/typing noise).
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


CHAR_EDITS = ("insert", "delete", "substitute", "swap")
WU_WORD_ATTACKS = ("word-add", "word-delete", "word-substitute", "word-any")  # Wu et al., Sec. 5.3.2
EXTRA_WORD_ATTACKS = ("word-swap", "word-synonym", "word-misspell")  # leakexp's own
WORD_ATTACKS = WU_WORD_ATTACKS + EXTRA_WORD_ATTACKS
WORD_EDITS = ("add", "remove", "substitute")  # word-any draws one of these per query

# The random words of word-add / word-substitute: common lower-case English content words, none a stop word.
# Fixed here (not read from data), so an attack is the same on every machine; a change bumps the stage version.
VOCABULARY = tuple(sorted(set("""
account action activity adult advice afternoon agency airport animal answer apple area army article artist
audience autumn baby bank basket battle beach bicycle bird blanket board boat bottle bread bridge brother
budget building butter camera candle capital carpet castle chair chapter cheese chicken child church circle
citizen city classroom climate clock cloud coast coffee colour computer concert cookie cottage country
courage cousin culture customer dance daughter desert dinner doctor dollar dragon dream driver eagle engine
evening factory family farmer feather festival finger flower forest fountain friend garden glass guitar
hammer harbour hospital island jacket journey kitchen ladder language lemon library lizard machine market
meadow mirror morning mountain museum needle night ocean orange painter pencil pepper piano picture planet
pocket potato prison pumpkin puzzle rabbit river rocket saddle salad season shadow shoulder silver sister
soldier spider spring station stomach street summer sunset table teacher thunder ticket tiger tomato tower
traffic train tunnel umbrella valley village violin volcano wagon window winter wizard yellow
""".split())))
DOC_MANIPULATIONS = ("stuff", "noise")
LETTERS = string.ascii_lowercase

# A small English stop-word list (the function words of NLTK's list, which Pruthi et al.'s attacks skip);
# attacks never edit these, and word-delete never leaves a query of stop words only.
STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between
both but by can did do does doing down during each few for from further had has have having he her here
hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now
of off on once only or other our ours ourselves out over own same she should so some such than that the
their theirs them themselves then there these they this those through to too under until up very was we
were what when where which while who whom why will with you your yours yourself yourselves
""".split())


class AttackError(ValueError):
    """An unknown attack name or a malformed word list; the message names it and the fix."""


def query_attacks() -> list[str]:
    """Every query attack name leakexp knows."""
    return [f"char-{e}-{n}" for e in (*CHAR_EDITS, "any") for n in (1, 2)] + list(WORD_ATTACKS)


def check_attack(name: str) -> str:
    if name not in query_attacks():
        raise AttackError(f"unknown query attack {name!r}; use one of {', '.join(query_attacks())}")
    return name


def defined_by_wu(name: str) -> bool:
    """Whether query attack ``name`` is one Wu et al. define (Sec. 5.3.2): the character edits (Add, Remove,
    Substitute, Swap; ``char-any-1`` / ``char-any-2`` are their 1-char / 2-char queries) and the word-level Add,
    Remove, Substitute with a random word and their mix (``word-any``). The others are leakexp's extras."""
    return check_attack(name).startswith("char-") or name in WU_WORD_ATTACKS


def check_manipulation(name: str) -> str:
    if name not in DOC_MANIPULATIONS:
        raise AttackError(f"unknown document manipulation {name!r}; use one of {', '.join(DOC_MANIPULATIONS)}")
    return name


# -- word lists --------------------------------------------------------------------------------------------
def bundled_wordlist(name: str) -> Path:
    """Path of a word list that ships with leakexp (``synonyms`` or ``misspellings``)."""
    return Path(str(resources.files("leakexp.data") / f"{name}.tsv"))


@lru_cache(maxsize=8)
def _read_wordlist(path: str, mtime: float) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    header_seen = False
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        if not header_seen:  # the first non-comment line is the header (word<TAB>...)
            header_seen = True
            if line.split("\t")[0] == "word":
                continue
        parts = line.split("\t")
        where = f"{path}, line {number}"
        if len(parts) != 2:
            raise AttackError(f"{where}: expected word<TAB>alternative,alternative,...; got {line!r}")
        word, alts = parts[0].strip(), tuple(a.strip() for a in parts[1].split(",") if a.strip())
        if not (re.fullmatch(r"[^\W\d_][^\W_]*", word) and word == word.lower()):
            raise AttackError(f"{where}: the word {word!r} must be one lower-case word")
        bad = [a for a in alts if not (re.fullmatch(r"[^\W\d_][^\W_]*", a) and a == a.lower()) or a == word]
        if not alts or bad:
            raise AttackError(f"{where}: {word!r} needs one or more lower-case one-word alternatives that differ "
                              f"from it, separated by commas; fix {bad or 'the empty list'}")
        if word in out:
            raise AttackError(f"{where}: {word!r} is listed twice; merge the two lines")
        out[word] = alts
    return out


def load_wordlist(path: str | Path) -> dict[str, tuple[str, ...]]:
    """word -> alternatives from a ``word<TAB>alt,alt`` file (``#`` comments; first line may be a header)."""
    p = Path(path)
    if not p.is_file():
        raise AttackError(f"word list {p} does not exist; give a word<TAB>alt,alt file or 'bundled'")
    return _read_wordlist(str(p.resolve()), p.stat().st_mtime)


@dataclass(frozen=True)
class WordLists:
    synonyms: dict[str, tuple[str, ...]]
    misspellings: dict[str, tuple[str, ...]]

    @classmethod
    def load(cls, synonyms: str | Path = "bundled", misspellings: str | Path = "bundled") -> "WordLists":
        s = bundled_wordlist("synonyms") if str(synonyms) == "bundled" else Path(synonyms)
        m = bundled_wordlist("misspellings") if str(misspellings) == "bundled" else Path(misspellings)
        return cls(load_wordlist(s), load_wordlist(m))


# -- character edits ---------------------------------------------------------------------------------------
def _content(word: str) -> bool:
    return word.isalpha() and word.lower() not in STOPWORDS


def edit_applies(word: str, edit: str) -> bool:
    """Whether ``edit`` can change an internal character of ``word`` (a letters-only, non-stop word)."""
    if not _content(word):
        return False
    if edit in ("insert", "delete", "substitute"):
        return len(word) >= 3
    if edit == "swap":
        return any(word[i] != word[i + 1] for i in range(1, len(word) - 2))
    if edit == "any":
        return any(edit_applies(word, e) for e in CHAR_EDITS)
    raise AttackError(f"unknown character edit {edit!r}; use one of {', '.join(CHAR_EDITS)} or any")


def edit_word(word: str, edit: str, rng: random.Random) -> tuple[str, str]:
    """``word`` with exactly one internal character edit, and the edit actually made (``any`` draws one)."""
    if edit == "any":
        edit = rng.choice([e for e in CHAR_EDITS if edit_applies(word, e)])
    if edit == "insert":  # a letter between two characters: word[:i] + c + word[i:], 1 <= i <= len - 1
        i = rng.randint(1, len(word) - 1)
        return word[:i] + rng.choice(LETTERS) + word[i:], edit
    if edit == "delete":  # an internal character
        i = rng.randint(1, len(word) - 2)
        return word[:i] + word[i + 1:], edit
    if edit == "substitute":  # an internal character by a different letter
        i = rng.randint(1, len(word) - 2)
        return word[:i] + rng.choice([c for c in LETTERS if c != word[i].lower()]) + word[i + 1:], edit
    if edit == "swap":  # two different adjacent internal characters
        i = rng.choice([i for i in range(1, len(word) - 2) if word[i] != word[i + 1]])
        return word[:i] + word[i + 1] + word[i] + word[i + 2:], edit
    raise AttackError(f"unknown character edit {edit!r}")


# -- query attacks -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttackedQuery:
    text: str
    applied: bool
    edits: str  # what changed, e.g. "disease->diseaxe (substitute)"; empty when not applied


def _match_case(template: str, word: str) -> str:
    return word.capitalize() if template[:1].isupper() else word


def _deletable(words: list[str]) -> list[int]:
    content = [i for i, w in enumerate(words) if _content(w)]
    return [i for i in content if any(j != i for j in content)]  # a content word must remain


def _word_edit_applies(words: list[str], edit: str) -> bool:
    if edit == "add":
        return True
    if edit == "remove":
        return bool(_deletable(words))
    return any(_content(w) for w in words)  # substitute


def attack_query(text: str, attack: str, rng: random.Random, lists: WordLists | None = None) -> AttackedQuery:
    """One query under one attack (see the module docstring); the query's other words stay as they are."""
    check_attack(attack)
    words = text.split()
    unchanged = AttackedQuery(text, False, "")
    if attack.startswith("char-"):
        _, edit, n = attack.split("-")
        n = int(n)
        eligible = [i for i, w in enumerate(words) if edit_applies(w, edit)]
        if len(eligible) < n:
            return unchanged
        out, notes = list(words), []
        for i in sorted(rng.sample(eligible, n)):
            out[i], made = edit_word(words[i], edit, rng)
            notes.append(f"{words[i]}->{out[i]} ({made})")
        return AttackedQuery(" ".join(out), True, "; ".join(notes))
    if attack == "word-any":  # Wu et al.'s word-level attack: one randomly chosen edit among those that apply
        edits = [e for e in WORD_EDITS if _word_edit_applies(words, e)]
        if not edits:
            return unchanged
        attack = {"add": "word-add", "remove": "word-delete", "substitute": "word-substitute"}[rng.choice(edits)]
    if attack == "word-add":
        new_words = [w for w in VOCABULARY if w not in {x.lower() for x in words}]
        i, w = rng.randint(0, len(words)), rng.choice(new_words)
        return AttackedQuery(" ".join(words[:i] + [w] + words[i:]), True, f"added {w}")
    if attack == "word-substitute":
        eligible = [i for i, w in enumerate(words) if _content(w)]
        if not eligible:
            return unchanged
        i = rng.choice(eligible)
        w = rng.choice([v for v in VOCABULARY if v not in {x.lower() for x in words}])
        return AttackedQuery(" ".join(words[:i] + [w] + words[i + 1:]), True, f"{words[i]}->{w} (random word)")
    if attack == "word-delete":
        eligible = _deletable(words)
        if not eligible:
            return unchanged
        i = rng.choice(eligible)
        return AttackedQuery(" ".join(words[:i] + words[i + 1:]), True, f"deleted {words[i]}")
    if attack == "word-swap":
        pairs = [(i, j) for i in range(len(words)) for j in range(i + 1, len(words))
                 if words[i].lower() != words[j].lower()]
        if not pairs:
            return unchanged
        i, j = rng.choice(pairs)
        out = list(words)
        out[i], out[j] = words[j], words[i]
        return AttackedQuery(" ".join(out), True, f"swapped {words[i]}<->{words[j]}")
    lists = lists or WordLists.load()
    table = lists.synonyms if attack == "word-synonym" else lists.misspellings
    eligible = [i for i, w in enumerate(words) if w.lower() in table]
    if not eligible:
        return unchanged
    i = rng.choice(eligible)
    new = _match_case(words[i], rng.choice(table[words[i].lower()]))
    out = list(words)
    out[i] = new
    return AttackedQuery(" ".join(out), True, f"{words[i]}->{new}")


def query_rng(seed: int, name: str, key: str) -> random.Random:
    """The generator of one (seed, attack or manipulation, query or document): order-independent."""
    return random.Random(f"{int(seed)}:{name}:{key}")


def attack_queries(topics: pd.DataFrame, attack: str, seed: int, lists: WordLists | None = None) -> pd.DataFrame:
    """Attacked versions of a (qid, query) frame: qid, original, attacked, applied, edits."""
    import pandas as pd

    lists = lists or WordLists.load()
    rows = []
    for qid, query in zip(topics.qid, topics["query"]):
        a = attack_query(str(query), attack, query_rng(seed, attack, str(qid)), lists)
        rows.append({"qid": qid, "original": query, "attacked": a.text, "applied": a.applied, "edits": a.edits})
    return pd.DataFrame(rows, columns=["qid", "original", "attacked", "applied", "edits"])


# -- document manipulations --------------------------------------------------------------------------------
_SPLIT = re.compile(r"(\s+)")


def stuff_document(text: str, query: str, repeats: int, rng: random.Random) -> str:
    """``text`` with ``repeats`` copies of ``query`` inserted at random word boundaries (query-term stuffing)."""
    words = text.split()
    for _ in range(int(repeats)):
        i = rng.randint(0, len(words))
        words[i:i] = query.split()
    return " ".join(words)


def noise_document(text: str, rate: float, rng: random.Random) -> tuple[str, int]:
    """``text`` with one length-preserving internal edit (substitute or swap) in each eligible word with
    probability ``rate``; whitespace and every other character stay. Returns (text, number of edited words)."""
    parts = _SPLIT.split(text)
    edited = 0
    for k in range(0, len(parts), 2):  # even positions are words, odd ones the whitespace between them
        w = parts[k]
        if not w or not edit_applies(w, "substitute"):
            continue
        if rng.random() >= rate:
            continue
        edit = rng.choice([e for e in ("substitute", "swap") if edit_applies(w, e)])
        parts[k], _ = edit_word(w, edit, rng)
        edited += 1
    return "".join(parts), edited


def stuffing_targets(pool: pd.DataFrame, from_rank: int, seed: int) -> pd.DataFrame:
    """One lower-ranked document per topic of a first-stage run (qid, query, docno, rank): drawn uniformly
    from ranks ``from_rank`` (0-based) and below, or the last document when the run is shorter."""
    import pandas as pd

    rows = []
    for qid, g in pool.sort_values(["qid", "rank"], kind="mergesort").groupby("qid", sort=False):
        if len(g) < 2:
            continue  # a ranking of one document cannot change
        low = g[g["rank"] >= from_rank]
        low = low if len(low) else g.tail(1)
        rng = query_rng(seed, "stuff", str(qid))
        r = low.iloc[rng.randrange(len(low))]
        rows.append({"qid": qid, "query": r["query"], "docno": r["docno"], "first_stage_rank": int(r["rank"])})
    return pd.DataFrame(rows, columns=["qid", "query", "docno", "first_stage_rank"])


def stuffed_documents(run: pd.DataFrame, docs, seed: int, repeats: int, from_rank: int) -> pd.DataFrame:
    """One stuffed document per topic of the first-stage ``run`` (qid, docno, first_stage_rank, query, text): a
    seeded document from rank ``from_rank`` down with the query stuffed in ``repeats`` times."""
    frame = stuffing_targets(run, from_rank, seed)
    frame["text"] = [stuff_document(docs[d], q, repeats, query_rng(seed, "stuff-text", str(qid)))
                     for qid, q, d in zip(frame.qid, frame["query"], frame.docno)]
    return frame


def noisy_documents(run: pd.DataFrame, docs, seed: int, rate: float) -> pd.DataFrame:
    """Every document of the first-stage ``run``'s pools with seeded character noise at ``rate`` (docno,
    edited_words, text); documents the noise left unchanged are left out."""
    import pandas as pd

    rows = []
    for d in sorted(set(run.docno)):
        text, n = noise_document(docs[d], rate, query_rng(seed, "noise", str(d)))
        if n:
            rows.append({"docno": d, "edited_words": n, "text": text})
    return pd.DataFrame(rows, columns=["docno", "edited_words", "text"])
