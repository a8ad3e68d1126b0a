import dataclasses
import math

import numpy as np
import pytest
import torch

from leakexp.models.knrm import KNRM, kernel_features
from leakexp.models.capreolus import WordCollator
from leakexp.models.vectors import WordVectors, word_tokens, similarity_matrix, word_ids
from leakexp.lib.trainer import set_seed


def test_kernel_features_on_a_2x3_similarity_matrix():
    sim = torch.tensor([[[0.5, 1.0, 0.0], [0.0, 0.0, 0.0]]])  # second query term matches nothing: masked
    mus, sigmas = torch.tensor([0.5, 1.0]), torch.tensor([0.1, 0.001])
    got = kernel_features(sim, mus, sigmas)
    k05 = 1 + math.exp(-0.5 * 0.25 / 0.01) + math.exp(-0.5 * 0.25 / 0.01)
    k10 = math.exp(-0.5 * 0.25 / 1e-6) + 1 + 0.0
    assert torch.allclose(got, torch.tensor([[math.log(k05 + 1e-6), math.log(k10 + 1e-6)]]), atol=1e-6)


def test_padding_feeds_the_near_zero_kernels_unless_masked():
    sim = torch.tensor([[[0.9, 0.0, 0.0, 0.0]]])  # one real doc token, three padded positions
    mus, sigmas = torch.tensor([0.1]), torch.tensor([0.1])
    quirk = kernel_features(sim, mus, sigmas)
    masked = kernel_features(sim, mus, sigmas, mask_doc_padding=True, doc_mask=torch.tensor([[1.0, 0, 0, 0]]))
    assert abs(quirk.item() - math.log(math.exp(-0.5 * 0.64 / 0.01) + 3 * math.exp(-0.5) + 1e-6)) < 1e-6
    assert masked.item() < quirk.item()


def test_similarity_matrix_cosine_exact_match_for_oov_and_zero_padding():
    vec = WordVectors({"tick": 1, "bite": 2}, torch.tensor([[0, 0], [1.0, 0], [1.0, 1.0]]).numpy(), "hand")
    docs = word_ids(["bite borreliosis tick"], vec, 4)
    queries = word_ids(["tick borreliosis"], vec, 3, {w: -(i + 1) for i, w in enumerate(docs.oov)})
    q, d, _ = WordCollator(maxqlen=3, maxdoclen=4, trim=False).ids(queries, docs)
    assert q.tolist() == [[1, -1, 0]] and d.tolist() == [[2, -1, 1, 0]]
    emb = torch.nn.Embedding.from_pretrained(torch.from_numpy(vec.matrix))
    s = similarity_matrix(emb, q, d)[0]
    assert torch.allclose(s[0], torch.tensor([1 / math.sqrt(2), 0.0, 1.0, 0.0]), atol=1e-6)
    assert s[1].tolist() == [0.0, 1.0, 0.0, 0.0]  # OOV matches OOV exactly
    assert s[2].tolist() == [0.0] * 4  # padded query position


def test_tokenizer_lowercases_and_drops_possessives():
    assert word_tokens("Hubble's Telescope, NASA-built; don't") == ["hubble", "telescope", "nasa", "built", "don't"]


# Lucene's StandardTokenizer (UAX#29 word boundaries) + EnglishPossessiveFilter + LowerCaseFilter, as Anserini's
# DefaultEnglishAnalyzer with keepstops and no stemmer (Capreolus' `anserini` tokenizer). Expected tokens follow
# Lucene's TestStandardAnalyzer (apache/lucene, lucene/core/src/test/org/apache/lucene/analysis/standard/), the test
# named in each comment, then the two filters.
LUCENE_CASES = [
    ("3.5", ["3.5"]),  # testNumericSA: "21.35" -> "21.35"; testMid: "1.2" -> "1.2"
    ("1,000", ["1,000"]),  # testMid: "1,2" -> "1,2"; testArmenian: "4,600" -> "4,600"
    ("216.239.63.104", ["216.239.63.104"]),  # testNumericSA
    ("U.S.", ["u.s"]),  # testMid: "A.B" -> "A.B"; a final "." is not between letters
    ("foo_bar", ["foo_bar"]),  # testMid: '_' is ExtendNumLet, "A:B_A:B" -> one token
    ("don't", ["don't"]),  # testApostrophesSA
    ("O'Neil's", ["o'neil"]),  # testApostrophesSA "O'Reilly's" -> "O'Reilly's"; possessive filter drops 's
    ("JIM'S she's", ["jim", "she"]),  # testApostrophesSA "Jim's", "she's"; the filter also matches 'S
    ("don\u2019t O\u2019Neil\u2019s", ["don\u2019t", "o\u2019neil"]),  # U+2019 is MidNumLet like '; filter strips ’s
    ("\u201cQUOTED\u201d word", ["quoted", "word"]),  # testVariousTextSA: "\"QUOTED\" word" (curly quotes too)
    ("Café naïve RÉSUMÉ", ["café", "naïve", "résumé"]),  # accents are letters; lower case keeps them
    ("mo\u0364chte", ["mo\u0364chte"]),  # testLUCENE1545: a combining mark stays in its word
    ("some-dashed-phrase ac/dc", ["some", "dashed", "phrase", "ac", "dc"]),  # testDelimitersSA
    ("A:B A::B 1..2", ["a:b", "a", "b", "1", "2"]),  # testMid
    ("R2D2 C3PO", ["r2d2", "c3po"]),  # testNumericSA
    ("我是中国人。 １２３４", ["我", "是", "中", "国", "人", "１２３４"]),  # testChinese: one token per ideograph
    ("poo\U0001f4a9poo", ["poo", "\U0001f4a9", "poo"]),  # testEmojiTokenization
    (". ,;", []),  # testEmpty: punctuation alone gives no token
    ("x" * 300, ["x" * 255, "x" * 45]),  # testMaxTokenLengthDefault: longer tokens are cut at 255
]


@pytest.mark.parametrize("text,expected", LUCENE_CASES)
def test_tokenizer_matches_lucene_standard_analyzer(text, expected):
    assert word_tokens(text) == expected


def test_trimmed_padding_scores_exactly_like_full_padding():
    set_seed(0)
    m = KNRM(maxdoclen=50)
    q, d = ["lyme disease ticks"], ["ticks carry lyme disease in the forest", "a short one"]
    trimmed = m.featurize(q * 2, d)
    q_tokens, d_tokens = m.encode_queries(q * 2, m.encode_docs(d)), m.encode_docs(d)
    full = dataclasses.replace(m.collator(), trim=False)(q_tokens, d_tokens)
    assert torch.equal(full["q"], trimmed["q"]) and torch.equal(full["d"][:, :7], trimmed["d"])
    assert trimmed["d"].shape[1] == 7 and full["d"].shape[1] == 50
    with torch.no_grad():
        assert torch.allclose(m(**trimmed), m(**full), atol=1e-5)


def test_glove_text_file_vectors_load_like_the_paper(tmp_path):
    glove = tmp_path / "glove.txt"
    glove.write_text("lyme 1.0 0.0 0.0\ntick 0.0 1.0 0.0\ndisease 1.0 1.0 0.0\n")
    m = KNRM(embeddings=str(glove), maxdoclen=8)
    assert m.vectors.dim == 3 and m.vectors.vocab == {"lyme": 1, "tick": 2, "disease": 3}
    assert m.embedding.weight[0].abs().sum() == 0  # <pad>
    f = m.featurize(["lyme disease"], ["tick lyme borreliosis"])
    assert f["q"].tolist() == [[1, 3, 0, 0]] and f["d"].tolist() == [[2, 1, -1]]
    with pytest.raises(FileNotFoundError, match="glove.6B.300d.txt"):
        KNRM(embeddings=str(tmp_path / "missing.txt"))


def test_glove_is_parsed_once_into_a_memory_mapped_cache_keyed_by_the_file(tmp_path, monkeypatch):
    from leakexp.models import vectors

    cache = tmp_path / "cache"
    monkeypatch.setenv("LEAKEXP_VECTORS_CACHE", str(cache))
    glove = tmp_path / "glove.txt"
    # a repeated word keeps its first vector; a line without values is skipped (as the text parser does)
    glove.write_text("lyme 1.0 0.0 0.5\ntick 0.0 1.0 0.25\nlyme 9 9 9\nshort\ndisease 1.0 1.0 0.0\n")
    parsed, unit_rows = vectors._glove(glove)
    vectors.load_word_vectors.cache_clear()
    first = vectors.load_word_vectors(str(glove))  # parses the text file and writes the cache
    assert len(list(cache.iterdir())) == 1
    vectors.load_word_vectors.cache_clear()
    monkeypatch.setattr(vectors, "_glove", lambda path: pytest.fail("the cached file was parsed again"))
    cached = vectors.load_word_vectors(str(glove))
    assert isinstance(cached.matrix, np.memmap)
    for v in (first, cached):
        assert v.vocab == parsed.vocab == {"lyme": 1, "tick": 2, "disease": 3} and v.source == parsed.source
        assert np.array_equal(v.matrix, parsed.matrix) and v.matrix.dtype == np.float32
        assert v.content_hash == parsed.content_hash  # checkpoints trained on the text file still load
    unit = vectors.load_word_vectors(str(glove), unit=True)  # pymagnitude's rows, from the same cache entry
    assert isinstance(unit.matrix, np.memmap) and np.array_equal(unit.matrix, unit_rows)
    assert len(list(cache.iterdir())) == 1

    m = KNRM(embeddings=str(glove), maxdoclen=8)  # a model over the memory-mapped matrix
    assert m.featurize(["lyme disease"], ["tick"])["q"].tolist() == [[1, 3, 0, 0]]
    m.save(tmp_path / "ckpt")
    assert torch.equal(KNRM.load(tmp_path / "ckpt").embedding.weight, torch.from_numpy(parsed.matrix))

    # another file content (size or time changed) is another cache entry
    monkeypatch.undo()
    monkeypatch.setenv("LEAKEXP_VECTORS_CACHE", str(cache))
    glove.write_text(glove.read_text() + "borreliosis 0.5 0.5 0.5\n")
    vectors.load_word_vectors.cache_clear()
    assert vectors.load_word_vectors(str(glove)).vocab["borreliosis"] == 4
    assert len(list(cache.iterdir())) == 2
    vectors.load_word_vectors.cache_clear()
