"""KNRM, PACRR and DUET scored and fed as Capreolus v0.2.x does: scores stored as float16 before ranking
(trainer/pytorch.py:320-321 at v0.2.6) and GloVe rows at unit length (pymagnitude's default, read by
extractor/common.py:34-39)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import paper_env

from leakexp.models.base import Reranker, rank_with_docno_ties, round_scores, ties_per_query
from leakexp.models.vectors import load_word_vectors, unit_rows
from leakexp.runner.registry import compose
from leakexp.lib import memorization as pure
from leakexp.stages.cell import Cell
from leakexp.runner.registry import runner as make_runner
from leakexp.stages.rerank import rerank, scoring


class TextScore(Reranker):
    """A stand-in model whose score is the number a document's text holds (fp32, as a model's output)."""

    name = "textscore"

    def __init__(self):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def featurize(self, queries, docs):
        return {"x": torch.tensor([float(t) for t in docs], dtype=torch.float32)}

    def forward(self, x):
        return x + self.dummy


# fp32 scores of one query: a/b and c/d differ below half precision's resolution at 1.0 and 0.5 (2**-10, 2**-11),
# in the opposite order of their docnos; e stays apart
SCORES = {"a": 1.0001, "b": 1.0004, "c": 0.50003, "d": 0.50009, "e": 0.25}


def _bm25():
    return pd.DataFrame({"qid": "1", "query": "q", "docno": list(SCORES), "score": [9.0, 8, 7, 6, 5],
                         "rank": range(5)})


def test_round_scores_is_numpys_half_precision_and_float32_keeps_the_scores():
    x = np.array([1.0001, 1.0004, 0.50003, -3.14159, 70000.0, 1e-8])
    half = round_scores(x, "float16")
    assert half.dtype == np.float64
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(half, x.astype(np.float32).astype(np.float16).astype(np.float64))
    assert half[0] == half[1] == 1.0 and half[2] == 0.5 and half[4] == np.inf  # beyond 65504: inf, as Capreolus
    np.testing.assert_array_equal(round_scores(x, "float32"), x)
    with pytest.raises(ValueError, match="score_dtype='bf16' is unknown; use float32 or float16"):
        round_scores(x, "bf16")


def test_float16_scores_tie_and_the_docno_breaks_the_tie():
    """Re-ranking with score_dtype float16 orders by the rounded score, then docno ascending; fp32 by the score."""
    docs = {d: repr(s) for d, s in SCORES.items()}
    fp32 = rerank(TextScore(), _bm25(), docs)
    fp16 = rerank(TextScore(), _bm25(), docs, score_dtype="float16")
    assert fp32.docno.tolist() == ["b", "a", "d", "c", "e"]
    assert fp16.docno.tolist() == ["a", "b", "c", "d", "e"]
    assert fp16.score.tolist() == [1.0, 1.0, 0.5, 0.5, 0.25] and fp16["rank"].tolist() == [0, 1, 2, 3, 4]
    expected = rank_with_docno_ties(_bm25()[["qid", "docno"]].assign(
        score=np.array(list(SCORES.values()), dtype=np.float32).astype(np.float16).astype(np.float64)))
    assert fp16.docno.tolist() == expected.docno.tolist()
    assert ties_per_query(fp32) == 0 and ties_per_query(fp16) == 4


def test_memorization_ranks_a_leaked_document_by_its_rounded_score():
    """A leaked document outside the run is scored, rounded like the run's scores, and inserted among them with
    the docno tie-break: fp32 1.0003 would beat 'b' (1.0001 < 1.0003 < 1.0004 beats 'a'), rounded it ties with
    'a' and 'b' at 1.0 and its docno 'aa' puts it between them."""
    docs = {d: repr(s) for d, s in SCORES.items()}
    leaked = pd.DataFrame({"topic": ["1"], "pair": [0], "train_qid": ["t"], "train_query": ["q"], "source": ["x"],
                           "docno": ["aa"], "text": ["1.0003"], "label": [1]})
    ranks = {}
    for dtype in ("float32", "float16"):
        run = rerank(TextScore(), _bm25(), docs, score_dtype=dtype)
        out = pure.rank_leaked(leaked, run, {"1": "q"},
                            lambda q, t, dtype=dtype: TextScore().score(q, t, score_dtype=dtype), always_score=False)
        ranks[dtype] = (float(out.score.iloc[0]), int(out["rank"].iloc[0]))
    assert ranks["float32"] == (pytest.approx(1.0003, abs=1e-6), 2)  # after b only
    assert ranks["float16"] == (1.0, 2)  # after a, before b


def test_score_dtype_keys_reranking_and_memorization_not_training(tmp_path):
    base = compose([f"store={tmp_path}", "grid.models=[knrm]"])
    half = compose([f"store={tmp_path}", "grid.models=[knrm]", "model_overrides.knrm.score_dtype=float16"])
    cell = Cell(base.grid.corpora[0], "msm", int(base.grid.sizes[0]), "knrm", int(base.grid.seeds[0]))
    r0, r1 = make_runner(base), make_runner(half)
    assert r0.key(cell.ask("train")) == r1.key(cell.ask("train"))
    for stage in ("rerank", "memorization"):
        assert r0.key(cell.ask(stage)) != r1.key(cell.ask(stage))
        assert scoring(r0.context(cell.ask(stage)))["score_dtype"] == "float32"
        assert scoring(r1.context(cell.ask(stage)))["score_dtype"] == "float16"


def test_experiment_paper_scores_capreolus_models_in_float16_on_unit_vectors(tmp_path, monkeypatch):
    cfg = compose([f"store={tmp_path}", *paper_env(tmp_path, monkeypatch)])
    for model in ("knrm", "pacrr", "duet"):
        m = cfg.model_of(model)
        assert (m.score_dtype, m.unit_vectors) == ("float16", True)
    for model in ("monot5", "monobert"):
        assert "score_dtype" not in cfg.values["models"][model]  # the schema's float32
    demo = compose([f"store={tmp_path}"])
    assert "score_dtype" not in demo.values["models"]["knrm"]


def test_captions_say_which_models_scores_are_rounded_and_read_unit_vectors(tmp_path, monkeypatch):
    from leakexp.tables.captions import recipe_note

    paper = compose([f"store={tmp_path}", *paper_env(tmp_path, monkeypatch)])
    note = recipe_note(paper, ["monot5", "knrm", "pacrr", "duet"])
    assert "Scores of KNRM, PACRR, Duet are rounded to float16 before ranking" in note
    assert "KNRM, PACRR, Duet read GloVe rows at unit length" in note
    assert "float16" not in recipe_note(paper, ["monot5"])
    demo = compose([f"store={tmp_path}"])
    assert "float16" not in recipe_note(demo, ["knrm", "duet"]) and "unit length" not in recipe_note(demo, ["knrm"])


def test_unit_rows_are_pymagnitudes_stored_vectors(tmp_path):
    """pymagnitude stores round(v / |v| * 1e7) and returns it / 1e7 in float32 (converter.py:375-383,
    __init__.py:1016-1023); KNRM's cosines are unchanged up to that rounding."""
    m = np.array([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0], [0.1234567891, -2.0, 0.5], [1e-3, 1e-3, 1e-3]], np.float32)
    u = unit_rows(m, chunk=2)
    assert u.dtype == np.float32
    np.testing.assert_array_equal(u[0], [0, 0, 0])  # the pad row stays zero
    np.testing.assert_array_equal(u[1], np.array([0.6, 0.8, 0.0], np.float32))
    for row, got in zip(m[1:].astype(np.float64), u[1:]):
        want = np.array([int(round(v * 10**7)) for v in row / np.linalg.norm(row)], np.float32) / np.float32(1e7)
        np.testing.assert_array_equal(got, want)
        assert abs(np.linalg.norm(got.astype(np.float64)) - 1) < 1e-6
    glove = tmp_path / "g.txt"
    glove.write_text("the 0.5 -1.5 2.0\ncat 3.0 4.0 0.0\n")
    raw, unit = load_word_vectors(str(glove)), load_word_vectors(str(glove), unit=True)
    assert unit.vocab == raw.vocab and unit.content_hash != raw.content_hash
    np.testing.assert_array_equal(unit.matrix, unit_rows(raw.matrix))
    np.testing.assert_array_equal(raw.matrix[2], [3.0, 4.0, 0.0])  # unit=False: GloVe's raw rows


def pymagnitude_vectors(text: str, precision: int = 7) -> dict[str, np.ndarray]:
    """What Capreolus reads of a GloVe text through pymagnitude (plasticityai/magnitude@7ac0bae): the converter parses
    each line's values with float() (converter.py:202-219), divides them by their norm (:375-376) and stores
    int(round(v * 10**precision)) (:382-383); a Magnitude with normalized=True reads those integers into a float32
    vector and divides it by float(10**precision) (__init__.py:1020-1023)."""
    out = {}
    for line in text.splitlines():
        line_split = line.strip().replace("\t", " ").split()
        vector = np.asarray([float(elem) for elem in line_split[1:]])
        magnitude = np.linalg.norm(vector)
        vector = vector / magnitude
        stored = tuple(int(round(v * (10**precision))) for v in vector)
        vec = np.zeros((len(stored),), dtype=np.float32)
        vec[0:len(stored)] = stored
        out[line_split[0]] = vec / float(10**precision)
    return out


def test_glove_unit_rows_equal_pymagnitudes_from_the_texts_float64_values(tmp_path):
    """GloVe-like rows (values of 3-6 significant digits, as glove.6B writes them) whose float32 parse, normalised,
    rounds about 1 % of the values to the neighbouring multiple of 1e-7: leakexp's unit rows are pymagnitude's, bit
    for bit, also when read back from the vectors cache; the raw rows stay the float32 parse of the text."""
    from leakexp.models.vectors import load_word_vectors as load

    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(60)]
    text = "".join(f"{w} {' '.join(f'{v:.{rng.integers(3, 7)}g}' for v in rng.normal(0, 0.4, 50))}\n" for w in words)
    glove = tmp_path / "glove.txt"
    glove.write_text(text)
    want = np.stack([pymagnitude_vectors(text)[w] for w in words])
    load.cache_clear()
    unit, raw = load(str(glove), unit=True), load(str(glove))
    assert [unit.vocab[w] for w in words] == list(range(1, 61))
    np.testing.assert_array_equal(unit.matrix[1:], want)
    np.testing.assert_array_equal(unit.matrix[0], np.zeros(50, np.float32))
    parsed32 = np.array([[np.float32(v) for v in line.split()[1:]] for line in text.splitlines()])
    np.testing.assert_array_equal(raw.matrix[1:], parsed32)
    differ = unit_rows(parsed32) != want  # normalising the float32 parse, as leakexp did
    assert 0.002 < differ.mean() < 0.05 and np.abs(unit_rows(parsed32) - want).max() < 1.5e-7
    load.cache_clear()  # a later process: both matrices from the cache entry
    again = load(str(glove), unit=True)
    np.testing.assert_array_equal(again.matrix, unit.matrix)
    assert again.content_hash == unit.content_hash != load(str(glove)).content_hash
    load.cache_clear()


@pytest.mark.parametrize("name", ["knrm", "pacrr", "duet"])
def test_capreolus_models_read_unit_rows_with_unit_vectors_and_save_the_setting(name, tmp_path):
    from leakexp.models import get, load_checkpoint

    glove = tmp_path / "g.txt"
    glove.write_text("".join(f"w{i} {i + 1.0} {2.0 - i} 0.5 3.0\n" for i in range(6)))
    extra = {"maxdoclen": 200, "nhidden": 99} if name == "duet" else {}
    model = get(name)(embeddings=str(glove), unit_vectors=True, **extra)
    rows = model.embedding.weight.detach().numpy()
    np.testing.assert_allclose(np.linalg.norm(rows[1:], axis=1), 1.0, atol=1e-6)
    assert np.abs(get(name)(embeddings=str(glove), **extra).embedding.weight[1:].norm(dim=1) - 1).max() > 0.5
    model.save(tmp_path / "m")
    again = load_checkpoint(tmp_path / "m")
    assert again.hparams["unit_vectors"] is True
    torch.testing.assert_close(again.embedding.weight, model.embedding.weight)


def test_a_new_parse_of_a_glove_file_rekeys_what_trains_on_it_and_nothing_else(tmp_path, monkeypatch):
    """How a word-vector file is parsed (float64, pymagnitude's unit rows: the vectors cache format) is part of the
    key of the tokens and models that read it; the bundled vectors and the transformers do not depend on it."""
    import leakexp.stages.tokens as tokens

    glove = tmp_path / "glove.txt"
    glove.write_text("the 0.5 -1.5 2.0\ncat 3.0 4.0 0.0\n")
    cfg = compose([f"store={tmp_path}", "grid.models=[knrm,monobert]", f"model_overrides.knrm.embeddings={glove}"])
    demo = compose([f"store={tmp_path}", "grid.models=[knrm,monobert]"])
    cells = {m: Cell(cfg.grid.corpora[0], "msm", int(cfg.grid.sizes[0]), m, 1) for m in ("knrm", "monobert")}
    before = {(name, m): make_runner(c).key(cells[m].ask("train")) for name, c in (("glove", cfg), ("demo", demo))
              for m in cells}
    monkeypatch.setattr(tokens, "VECTORS_CACHE_FORMAT", tokens.VECTORS_CACHE_FORMAT - 1)  # the former parse
    after = {(name, m): make_runner(c).key(cells[m].ask("train")) for name, c in (("glove", cfg), ("demo", demo))
             for m in cells}
    assert before[("glove", "knrm")] != after[("glove", "knrm")]
    assert {k: v for k, v in before.items() if k != ("glove", "knrm")} == \
        {k: v for k, v in after.items() if k != ("glove", "knrm")}
