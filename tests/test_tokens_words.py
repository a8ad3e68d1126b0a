"""KNRM, PACRR and DUET from token ids encoded once (documents over a whole corpus, queries sharing the documents'
unknown-word ids) give exactly the tensors and scores of the per-batch tokenising they replace.

The reference below is that former code: a fresh id map per batch (queries first, then documents) that gives
unknown words ids -1, -2, … in first-seen order, and each model's former ``featurize`` and ``score``."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
import torch
from floats import EPS32, assert_close_float32

from leakexp.data.files import iter_docs, read_queries, read_trec_topics
from leakexp.data.toy import generate
from leakexp.models.capreolus import CapreolusReranker, IdfTable
from leakexp.models.duet import DUET
from leakexp.models.knrm import KNRM
from leakexp.models.pacrr import PACRR
from leakexp.models.tokens import Tokens
from leakexp.models.vectors import TOKENIZER_VERSION, WordVectors, word_tokens, load_word_vectors
from leakexp.lib.trainer import set_seed


# -- the reference: per-batch id maps, as every batch used to tokenise its texts ---------------------------------
class TextIds:
    """Token ids as Capreolus' embedtext extractor makes them, one instance per batch: known words by vocabulary
    id, unknown words -1, -2, … in first-seen order within the batch, padding 0."""

    def __init__(self, vectors: WordVectors):
        self.vectors = vectors
        self.oov: dict[str, int] = {}

    def ids(self, text: str, length: int) -> list[int]:
        out = []
        for tok in word_tokens(text)[:length]:
            i = self.vectors.vocab.get(tok)
            if i is None:
                i = self.oov.setdefault(tok, -(len(self.oov) + 1))
            out.append(i)
        return out + [0] * (length - len(out))

    def batch(self, texts: list[str], length: int, trim: bool = False) -> torch.Tensor:
        rows = [self.ids(t, length) for t in texts]
        if trim and rows:
            width = max(1, max(sum(1 for i in r if i != 0) for r in rows))
            rows = [r[:width] for r in rows]
        return torch.tensor(rows, dtype=torch.long)

    @property
    def oov_words(self) -> list[str]:
        return sorted(self.oov, key=lambda w: -self.oov[w])


def old_idf(model: CapreolusReranker, queries: list[str]) -> torch.Tensor:
    table = model.idf_table
    rows = []
    for t in queries:
        v = [table.idf(tok) for tok in word_tokens(t)[: model.maxqlen]]
        rows.append(v + [0.0] * (model.maxqlen - len(v)))
    return torch.tensor(rows, dtype=torch.float32)


def old_featurize(model: CapreolusReranker, queries: list[str], docs: list[str]) -> dict[str, torch.Tensor]:
    ids = TextIds(model.vectors)
    if isinstance(model, KNRM):
        return {"q": ids.batch(queries, model.hparams["maxqlen"]),
                "d": ids.batch(docs, model.hparams["maxdoclen"], trim=True)}
    if isinstance(model, PACRR):
        q = ids.batch(queries, model.maxqlen)
        feats = {"q": q, "d": ids.batch(docs, model.maxdoclen, trim=True)}
        if model.hparams["idf"]:
            feats["idf"] = (torch.zeros(q.shape, dtype=torch.float32) if model.hparams["idf_zero_quirk"]
                            else old_idf(model, queries))
        return feats
    assert isinstance(model, DUET)
    q, d = ids.batch(queries, model.maxqlen), ids.batch(docs, model.maxdoclen)
    words = ids.oov_words
    oov = torch.stack([model.oov_vector(w) for w in words]) if words else torch.zeros(0, model.vectors.dim)
    feats = {"q": q, "d": d, "oov": oov}
    feats["idf"] = old_idf(model, queries) if model.needs_idf else torch.zeros(q.shape, dtype=torch.float32)
    return feats


@torch.inference_mode()
def old_score(model: CapreolusReranker, queries: list[str], docs: list[str], batch_size: int = 64,
              length=len) -> list[float]:
    """The former ``score``: batches of documents sorted by ``length`` (it was the text's length in characters;
    ``score`` now sorts by the number of analyzed tokens)."""
    model.eval()
    order = sorted(range(len(docs)), key=lambda i: length(docs[i]))
    out = [0.0] * len(docs)
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        scores = model(**old_featurize(model, [queries[i] for i in idx], [docs[i] for i in idx])).float()
        for i, v in zip(idx, scores.tolist()):
            out[i] = float(v)
    return out


def assert_same(new: dict, old: dict) -> None:
    assert list(new) == list(old)
    for k in old:
        assert new[k].dtype == old[k].dtype and new[k].shape == old[k].shape, k
        assert torch.equal(new[k], old[k]), k


# -- models and texts ------------------------------------------------------------------------------------------
MODELS = {
    "knrm": lambda: KNRM(maxdoclen=16),
    "knrm-800": lambda: KNRM(),
    "pacrr-quirk": lambda: PACRR(maxdoclen=16),
    "pacrr-idf": lambda: PACRR(maxdoclen=16, idf_zero_quirk=False),
    "pacrr-no-idf": lambda: PACRR(maxdoclen=16, idf=False),
    "duet-idf": lambda: DUET(maxdoclen=120, nhidden=19),
    "duet-no-idf": lambda: DUET(maxdoclen=120, nhidden=19, idfweight=False),
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The toy world's documents (an empty one and ones longer than 800 words among them) and queries (titles,
    variants, training queries)."""
    root = tmp_path_factory.mktemp("toy")
    generate(root, seed=42, queries_per_source=60)
    docs = [t for _, t in iter_docs(root / "robust" / "docs.jsonl")]
    docs += [t for _, t in iter_docs(root / "train" / "docs.jsonl")][:150]
    queries = []
    for t in read_trec_topics(root / "robust" / "topics.txt"):
        queries += [t.title, *t.variants[:2]]
    for source in ("msmarco", "orcas"):
        queries += read_queries(root / "train" / f"{source}.queries.tsv").text.tolist()[:30]
    assert "" in docs and max(len(word_tokens(d)) for d in docs) > 800
    return docs, queries


@pytest.fixture(scope="module")
def models(world):
    table = IdfTable.from_docs(world[0])
    out = {}
    for i, (name, make) in enumerate(MODELS.items()):
        set_seed(i)
        m = make()
        if m.needs_idf:
            m.use_idf(table)
        if isinstance(m, PACRR):
            with torch.no_grad():
                for conv in m.convs:
                    conv.bias.uniform_(-0.5, 0.5)  # the padded windows' value matters
        out[name] = m.eval()
    return out


# unknown to the bundled vocabulary (whole words only): they get negative ids
UNKNOWN = ["xyzzy", "plugh", "frobnoz", "qwfpgj", "zzqxv"]

HAZARDS = [
    # an unknown word shared by query and document; repeated unknown words
    (["xyzzy lyme report", "plugh plugh plugh plugh", "the forest"],
     ["the xyzzy report on xyzzy", "plugh frobnoz plugh frobnoz xyzzy", "forest xyzzy plugh"]),
    # a query's unknown word that no document holds; empty and token-less texts
    (["qwfpgj forest", "", ". ,;", "zzqxv"], ["the forest and the bear", "", "weather xyzzy", ". ,;"]),
    # documents longer than maxdoclen: an unknown word past the cut gets no id, one inside it does
    (["frobnoz report", "xyzzy weather"],
     [" ".join(["weather"] * 900 + ["frobnoz", "xyzzy"]), "report frobnoz " + " ".join(["news"] * 30)]),
    # a query longer than maxqlen: its unknown words past maxqlen are not part of the batch
    (["the forest bear news xyzzy plugh"], ["xyzzy plugh forest"]),
    # every document empty
    (["lyme xyzzy", "forest"], ["", ""]),
    (["xyzzy"], [". ,;"]),
]


def test_the_reference_is_the_former_code_on_a_hand_case():
    """The copied reference gives what the former featurize gave (a test of this file)."""
    m = KNRM(maxdoclen=8)
    assert not set(UNKNOWN) & set(m.vectors.vocab)  # the hazards' unknown words are unknown
    f = old_featurize(m, ["plugh lyme"], ["xyzzy plugh the"])
    assert f["q"].tolist() == [[-1, m.vectors.vocab.get("lyme", -2), 0, 0]]
    assert f["d"][0, :2].tolist() == [-2 if "lyme" in m.vectors.vocab else -3, -1] and f["d"].shape == (1, 3)


@pytest.mark.parametrize("name", list(MODELS))
def test_featurize_equals_the_former_per_batch_ids_on_hazards(name, models):
    m = models[name]
    for queries, docs in HAZARDS:
        assert_same(m.featurize(queries, docs), old_featurize(m, queries, docs))


@pytest.mark.parametrize("name", list(MODELS))
def test_batches_gathered_from_tokens_encoded_once_equal_the_former_featurize(name, models, world):
    """Documents encoded once over the whole corpus (unknown ids shared by all of it), queries once against them;
    any batch gathered from those rows collates to the tensors the batch's own tokenising gave."""
    m = models[name]
    docs, queries = world
    docs = docs + [d for _, ds in HAZARDS for d in ds]
    queries = queries + [q for qs, _ in HAZARDS for q in qs]
    d_tokens = m.encode_docs(docs)
    q_tokens = m.encode_queries(queries, d_tokens)
    assert q_tokens.oov[: len(d_tokens.oov)] == d_tokens.oov
    collate = m.collator()
    rng = random.Random(0)
    batches = [[(rng.randrange(len(queries)), rng.randrange(len(docs))) for _ in range(rng.choice([1, 3, 8, 16]))]
               for _ in range(25)]
    batches.append([(rng.randrange(len(queries)), docs.index("")) for _ in range(3)])  # every document empty
    for batch in batches:
        qi, di = [i for i, _ in batch], [j for _, j in batch]
        new = collate(q_tokens.take(qi), d_tokens.take(di))
        assert_same(new, old_featurize(m, [queries[i] for i in qi], [docs[j] for j in di]))


def test_document_tokens_share_unknown_ids_over_all_documents_and_keep_full_lengths(monkeypatch):
    docs = ["xyzzy the plugh", "", "plugh frobnoz " + "news " * 20, "qwfpgj"]
    monkeypatch.setattr(KNRM, "__init__", lambda *a, **k: pytest.fail("document_tokens built the model"))
    t = KNRM.document_tokens({"embeddings": "bundled", "maxdoclen": 3}, docs)
    vocab = load_word_vectors("bundled").vocab
    assert t.oov == ("xyzzy", "plugh", "frobnoz", "qwfpgj")  # first-seen order over all the documents
    assert t.full.tolist() == [3, 0, 22, 1] and t.lengths.tolist() == [3, 0, 3, 1]
    assert t.row(0).tolist() == [-1, vocab["the"], -2] and t.row(2).tolist() == [-2, -3, vocab["news"]]
    assert t.row(3).tolist() == [-4] and t.ids.dtype == np.int32
    # a word seen only past a document's cut gets no id
    cut = KNRM.document_tokens({"embeddings": "bundled", "maxdoclen": 2}, ["the news xyzzy", "plugh"])
    assert cut.oov == ("plugh",) and cut.full.tolist() == [3, 1]
    # the settings' defaults are the constructor's
    monkeypatch.undo()
    assert KNRM.document_tokens({}, docs).lengths.tolist() == [3, 0, 22, 1]


def test_queries_extend_the_documents_unknown_words_and_carry_idf(models):
    m = models["duet-idf"]
    d = m.encode_docs(["xyzzy the plugh"])
    q = m.encode_queries(["plugh qwfpgj xyzzy qwfpgj forest", "zzqxv"], d)
    assert q.oov == ("xyzzy", "plugh", "qwfpgj", "zzqxv")
    assert q.row(0).tolist() == [-2, -3, -1, -3] and q.row(1).tolist() == [-4] and q.full.tolist() == [5, 1]
    assert q.weights.dtype == np.float32 and q.weights.shape == (2, 4)
    table = m.idf_table
    assert q.weights[1].tolist() == pytest.approx([table.idf("zzqxv"), 0, 0, 0])
    assert models["knrm"].encode_queries(["forest"], d).weights is None
    assert models["pacrr-no-idf"].encode_queries(["forest"], d).weights is None
    assert not models["pacrr-quirk"].encode_queries(["forest"], d).weights.any()
    assert not models["duet-no-idf"].encode_queries(["forest"], d).weights.any()


def test_encoding_id_names_the_vectors_content_and_the_analyzer(tmp_path):
    vectors = load_word_vectors("bundled")
    assert KNRM.encoding_id({"embeddings": "bundled"}) == f"{vectors.content_hash}:{TOKENIZER_VERSION}"
    assert DUET.encoding_id({"embeddings": "bundled", "maxdoclen": 120}) == KNRM.encoding_id({})
    assert KNRM.ENCODING == PACRR.ENCODING == DUET.ENCODING == ("embeddings", "maxdoclen")
    glove = tmp_path / "glove.txt"
    glove.write_text("lyme 1.0 0.0\n")
    assert KNRM.encoding_id({"embeddings": str(glove)}) != KNRM.encoding_id({})


@pytest.mark.parametrize("name", ["knrm", "pacrr-idf", "duet-idf"])
def test_stored_tokens_and_a_pickled_collator_give_the_same_tensors(name, models, tmp_path):
    m = models[name]
    docs = [d for _, ds in HAZARDS for d in ds]
    queries = [q for qs, _ in HAZARDS for q in qs]
    queries = (queries * 2)[: len(docs)]
    d_tokens = m.encode_docs(docs)
    d_tokens.keys = [f"d{i}" for i in range(len(docs))]
    q_tokens = m.encode_queries(queries, d_tokens)
    d_tokens.save(tmp_path, "docs")
    q_tokens.save(tmp_path, "queries")
    d_back, q_back = Tokens.load(tmp_path, "docs"), Tokens.load(tmp_path, "queries")
    assert d_back.keys == d_tokens.keys and d_back.oov == d_tokens.oov and q_back.oov == q_tokens.oov
    collate = m.collator()
    blob = pickle.dumps(collate)
    assert len(blob) < 1000  # settings only: no vectors, no model
    unpickled = pickle.loads(blob)
    idx = list(range(len(docs)))[::-1]
    expected = old_featurize(m, [queries[i] for i in idx], [docs[i] for i in idx])
    assert_same(collate(q_tokens.take(idx), d_tokens.take(idx)), expected)
    assert_same(unpickled(q_back.take(idx), d_back.take(idx)), expected)


def score_pairs(world) -> tuple[list[str], list[str]]:
    docs, queries = world
    rng = random.Random(1)
    pairs = [(rng.choice(queries), rng.choice(docs)) for _ in range(40)]
    pairs += [(q, d) for qs, ds in HAZARDS for q, d in zip(qs, ds)]
    return [q for q, _ in pairs], [d for _, d in pairs]


@pytest.mark.parametrize("name", list(MODELS))
def test_scores_equal_the_former_scores(name, models, world):
    """One batch holds every pair: the same tensors, in another row order, and the same scores up to float32 rounding
    (a kernel may block rows differently by their order: on some CPUs the last bits differ). The reductions are at
    most 800 document tokens x 300 dimensions long."""
    m = models[name]
    qs, ds = score_pairs(world)
    assert len(qs) <= 64
    new, former = m.score(qs, ds, batch_size=64), old_score(m, qs, ds, batch_size=64)
    assert_close_float32(new, former, terms=800)
    assert np.std(new) > 10 * 800 * EPS32  # the tolerance is far below the spread of the scores it compares


@pytest.mark.parametrize("name", list(MODELS))
def test_scores_in_small_batches_equal_the_former_scores_of_the_same_batches(name, models, world):
    """``score`` groups documents by their number of tokens, the former one by their number of characters: given
    the same batches the scores are equal; in other batches they can differ in the last bits (float rounding
    depends on the batch's shape)."""
    m = models[name]
    qs, ds = score_pairs(world)
    new = m.score(qs, ds, batch_size=5)
    assert new == old_score(m, qs, ds, batch_size=5, length=lambda d: len(word_tokens(d)))
    assert np.allclose(new, old_score(m, qs, ds, batch_size=5), rtol=1e-5, atol=1e-6)
