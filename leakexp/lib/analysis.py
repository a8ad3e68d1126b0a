"""Text analysis of the BM25 first stage: Anserini's ``DefaultEnglishAnalyzer`` in Python, and PISA's term form.

The paper re-ranks Capreolus' default BM25, i.e. Anserini's ``DefaultEnglishAnalyzer``: Lucene's StandardTokenizer,
EnglishPossessiveFilter, lower case, Lucene's 33-word English stop list removed from documents and queries, and the
original Porter stemmer (capreolus-ir/capreolus, capreolus/index/anserini.py: ``AnseriniIndex`` ``stemmer="porter"``,
``indexstops=False``; castorini/anserini, src/main/java/io/anserini/analysis/DefaultEnglishAnalyzer.java,
``newDefaultInstance``). PISA has porter2 and Krovetz but no original Porter, so ``stemmer=porter`` analyses text
here (:func:`analyze`) and hands PISA the analysed terms with its own stemmer and stop list off.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache

log = logging.getLogger(__name__)

log = logging.getLogger(__name__)

# PISA's query parser chokes on some punctuation; BM25 ignores it anyway.
_UNSAFE = re.compile(r"[^\w\s]", re.UNICODE)


def clean_query(text: str) -> str:
    return " ".join(_UNSAFE.sub(" ", text).split())


# -- analysis ------------------------------------------------------------------------------------------
STEMMERS = ("porter2", "porter", "krovetz", "none")
STOPWORD_LISTS = ("terrier", "lucene", "none")
DEFAULT_ANALYSIS = {"stemmer": "porter2", "stopwords": "terrier"}  # pyterrier-pisa's defaults
ANSERINI_ANALYSIS = {"stemmer": "porter", "stopwords": "lucene"}  # Anserini's / Capreolus' default (the paper)

# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (apache/lucene, lucene/analysis/common/src/java/org/apache/
# lucene/analysis/en/EnglishAnalyzer.java), Anserini's default stop list; pyterrier-pisa's 'lucene' list is the same.
LUCENE_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)

# Lucene's StandardTokenizer (Unicode UAX #29 word boundaries), approximated: runs of letters, digits and
# underscores, joined by an apostrophe, a full stop or a colon between them ("U.S.", "don't") and by a
# comma between digits ("3,000"); hyphens and other punctuation separate words.
_TOKEN = re.compile(r"\w+(?:(?:['\u2019\uff07.:]|(?<=\d),(?=\d))\w+)*")
_POSSESSIVE = re.compile(r"['\u2019\uff07][sS]$")  # Lucene's EnglishPossessiveFilter
_PISA_SAFE = re.compile(r"[a-z0-9]+")


def check_analysis(stemmer: str, stopwords: str) -> None:
    """Fail early, naming the key, on an analysis leakexp does not offer."""
    if stemmer not in STEMMERS:
        raise ValueError(f"bm25.stemmer={stemmer!r} is unknown; use one of {', '.join(STEMMERS)}")
    if stopwords not in STOPWORD_LISTS:
        raise ValueError(f"bm25.stopwords={stopwords!r} is unknown; use one of {', '.join(STOPWORD_LISTS)}")


def _stop_set(stopwords: str) -> frozenset[str]:
    if stopwords == "lucene":
        return LUCENE_STOPWORDS
    if stopwords == "terrier":
        from pyterrier_pisa.stopwords import _STOPWORDS  # the list PISA itself uses for stops='terrier'

        return frozenset(_STOPWORDS["terrier"])
    return frozenset()


@lru_cache(maxsize=None)
def _stemmer(name: str):
    import snowballstemmer

    return snowballstemmer.stemmer({"porter2": "english"}[name])


@lru_cache(maxsize=1 << 20)
def _stem(word: str, stemmer: str) -> str:
    # Lucene's PorterStemmer leaves words of one or two characters alone (stem(): "if (k > k0 + 1)")
    if len(word) <= 2:
        return word
    return lucene_porter(word) if stemmer == "porter" else _stemmer(stemmer).stemWord(word)


def lucene_porter(word: str) -> str:
    """The original Porter stemmer as Lucene's ``PorterStemmer`` has it: Martin Porter's reference C code
    (tartarus.org/martin/PorterStemmer), whose two departures from the published algorithm Lucene keeps:
    step 2 maps ``bli``->``ble`` (not ``abli``->``able``) and ``logi``->``log`` (apache/lucene,
    lucene/analysis/common/src/java/org/apache/lucene/analysis/en/PorterStemmer.java). Snowball's ``porter``
    is the published algorithm and differs on these words (``possibly``: Lucene ``possibl``, Snowball
    ``possibli``; ``ecology``: ``ecolog`` / ``ecologi``). Checked against Lucene on 21,358 English words."""
    b = list(word)
    k = len(b) - 1
    if k <= 1:
        return word
    j = 0

    def cons(i: int) -> bool:
        c = b[i]
        if c in "aeiou":
            return False
        if c == "y":
            return i == 0 or not cons(i - 1)
        return True

    def m() -> int:  # consonant sequences between vowel sequences in b[0..j]
        n, i = 0, 0
        while True:
            if i > j:
                return n
            if not cons(i):
                break
            i += 1
        i += 1
        while True:
            while True:
                if i > j:
                    return n
                if cons(i):
                    break
                i += 1
            i += 1
            n += 1
            while True:
                if i > j:
                    return n
                if not cons(i):
                    break
                i += 1
            i += 1

    def vowel_in_stem() -> bool:
        return any(not cons(i) for i in range(j + 1))

    def doublec(i: int) -> bool:
        return i >= 1 and b[i] == b[i - 1] and cons(i)

    def cvc(i: int) -> bool:
        return i >= 2 and cons(i) and not cons(i - 1) and cons(i - 2) and b[i] not in "wxy"

    def ends(s: str) -> bool:
        nonlocal j
        if len(s) > k + 1 or "".join(b[k - len(s) + 1:k + 1]) != s:
            return False
        j = k - len(s)
        return True

    def setto(s: str) -> None:
        nonlocal k
        b[j + 1:] = list(s)
        k = j + len(s)

    def r(s: str) -> None:
        if m() > 0:
            setto(s)

    # step 1ab: plurals, -ed, -ing
    if b[k] == "s":
        if ends("sses"):
            k -= 2
        elif ends("ies"):
            setto("i")
        elif b[k - 1] != "s":
            k -= 1
    if ends("eed"):
        if m() > 0:
            k -= 1
    elif (ends("ed") or ends("ing")) and vowel_in_stem():
        k = j
        if ends("at"):
            setto("ate")
        elif ends("bl"):
            setto("ble")
        elif ends("iz"):
            setto("ize")
        elif doublec(k):
            k -= 1
            if b[k] in "lsz":
                k += 1
        else:
            j = k
            if m() == 1 and cvc(k):
                j = k
                setto("e")
    # step 1c: y -> i when there is another vowel in the stem
    if ends("y") and vowel_in_stem():
        b[k] = "i"
    # step 2: double suffixes; the first suffix that matches decides (C: break after ends())
    if k >= 1:
        for suffix, repl in _PORTER_STEP2.get(b[k - 1], ()):
            if ends(suffix):
                r(repl)
                break
    # step 3
    for suffix, repl in _PORTER_STEP3.get(b[k], ()):
        if ends(suffix):
            r(repl)
            break
    # step 4: drop a suffix when m() > 1
    if k >= 1:
        for suffix in _PORTER_STEP4.get(b[k - 1], ()):
            if ends(suffix):
                if suffix == "ion" and not (j >= 0 and b[j] in "st"):
                    continue
                if m() > 1:
                    k = j
                break
    # step 5: final -e and -ll
    j = k
    if b[k] == "e":
        a = m()
        if a > 1 or (a == 1 and not cvc(k - 1)):
            k -= 1
    if b[k] == "l" and doublec(k):
        if m() > 1:  # measured up to the k before step 5, as in the C code
            k -= 1
    return "".join(b[:k + 1])


_PORTER_STEP2 = {
    "a": (("ational", "ate"), ("tional", "tion")),
    "c": (("enci", "ence"), ("anci", "ance")),
    "e": (("izer", "ize"),),
    "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")),  # bli: departure
    "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
    "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
    "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
    "g": (("logi", "log"),),  # departure
}
_PORTER_STEP3 = {
    "e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
    "i": (("iciti", "ic"),),
    "l": (("ical", "ic"), ("ful", "")),
    "s": (("ness", ""),),
}
_PORTER_STEP4 = {
    "a": ("al",), "c": ("ance", "ence"), "e": ("er",), "i": ("ic",), "l": ("able", "ible"),
    "n": ("ant", "ement", "ment", "ent"), "o": ("ion", "ou"), "s": ("ism",), "t": ("ate", "iti"), "u": ("ous",),
    "v": ("ive",), "z": ("ize",),
}


def analyze(text: str, stemmer: str = "porter", stopwords: str = "lucene") -> list[str]:
    """Terms of ``text`` under Anserini's analysis chain: tokenise (StandardTokenizer, approximated), drop
    a trailing possessive 's, lower-case, drop stop words, stem (``porter``: the original Porter stemmer,
    Lucene's PorterStemmer, :func:`lucene_porter`; ``porter2``: Snowball English; ``none``)."""
    check_analysis(stemmer, stopwords)
    if stemmer == "krovetz":
        raise ValueError("bm25.stemmer=krovetz is PISA's own; leakexp analyses text itself only for porter")
    stops = _stop_set(stopwords)
    out = []
    for token in _TOKEN.findall(text):
        word = _POSSESSIVE.sub("", token).lower()
        if not word or word in stops:
            continue
        out.append(word if stemmer == "none" else _stem(word, stemmer))
    return out


def pisa_term(term: str) -> str:
    """A term PISA's tokenizer keeps whole: ASCII letters and digits stay; anything else ("u.s", "café") is
    written as 'zzq' + its UTF-8 bytes in hex, the same way in documents and queries."""
    return term if _PISA_SAFE.fullmatch(term) else "zzq" + term.encode("utf-8").hex()


def analyzed_text(text: str, stemmer: str = "porter", stopwords: str = "lucene") -> str:
    """``text`` as the space-separated PISA terms of :func:`analyze`."""
    return " ".join(pisa_term(t) for t in analyze(text, stemmer, stopwords))


