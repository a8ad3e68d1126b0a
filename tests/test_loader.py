"""The training loop's data pipeline: batches gathered from documents encoded once (the tokens stage), collated by
DataLoader workers. None of it may change a number."""

import numpy as np
import pandas as pd
import pytest
import torch

from leakexp.models import get
from leakexp.models.tokens import Tokens
from leakexp.lib.trainer import PairBatches, Training, loader_workers, pairs_of, set_seed, train


def _instances(n: int = 24, seed: int = 0) -> pd.DataFrame:
    """Pairs whose documents repeat across queries (as BM25 negatives do) and hold words outside the vocabulary."""
    rng = np.random.default_rng(seed)
    words = ["river", "bank", "money", "loan", "water", "fish", "zqxv", "blorpt", "interest", "flood", "qqzzk"]
    docs = {f"d{i}": " ".join(rng.choice(words, size=int(rng.integers(0, 40)))) for i in range(n)}
    rows = []
    for p in range(n):
        query = " ".join(rng.choice(words, size=3))
        pos, neg = rng.choice(list(docs), size=2, replace=False)
        rows += [(p, f"q{p}", query, pos, docs[pos], 1), (p, f"q{p}", query, neg, docs[neg], 0)]
    return pd.DataFrame(rows, columns=["pair", "qid", "query", "docno", "text", "label"])


def _train(name: str, data: pd.DataFrame, **kw):
    set_seed(3)
    model = get(name)(embeddings="bundled", maxqlen=4, maxdoclen=32) if name != "monobert" else \
        get(name)(checkpoint="bundled", max_length=48)
    cfg = Training(batch_size=4, lr=1e-3 if name != "monobert" else 1e-4, decay="constant")
    result = train(model, data, seed=3, cfg=cfg, progress=False, **kw)
    return model, result


@pytest.mark.parametrize("name", ["knrm", pytest.param("monobert", marks=pytest.mark.slow)])  # monobert: ~20 s
def test_workers_and_stored_tokens_change_no_number(name, tmp_path):
    """Collated in this thread from texts, by 2 worker processes, or gathered from tokens stored and memory-mapped:
    the same losses and the same weights, exactly."""
    data = _instances()
    ref_model, ref = _train(name, data)
    _, with_workers = _train(name, data, workers=2)
    docs_frame = data.drop_duplicates("docno").sort_values("docno")
    stored = type(ref_model).document_tokens(ref_model.hparams, docs_frame.text.tolist())
    stored.keys = docs_frame.docno.tolist()
    stored.save(tmp_path, "docs")
    loaded = Tokens.load(tmp_path, "docs")
    assert isinstance(loaded.ids, np.memmap)
    model, from_store = _train(name, data, docs=loaded)
    pd.testing.assert_frame_equal(ref.history, with_workers.history)
    pd.testing.assert_frame_equal(ref.history, from_store.history)
    for (k, a), b in zip(ref_model.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("name", ["knrm", "monobert"])
def test_a_batch_is_what_featurize_makes_of_its_texts(name):
    """PairBatches' item = the model's features of the batch's texts: for a pairwise model the positives and the
    negatives apart, for a pointwise one each query's positive and negative side by side with labels 1, 0."""
    data = _instances(8)
    model = get(name)(embeddings="bundled", maxqlen=4, maxdoclen=32) if name != "monobert" else \
        get(name)(checkpoint="bundled", max_length=48)
    pos, neg = pairs_of(data)
    idx = np.array([5, 0, 3])
    item = PairBatches.of(model, pos, neg, [idx])[0]
    p, n = pos.iloc[idx], neg.iloc[idx]
    if model.objective == "pairwise":
        expected = {"pos": model.featurize(p["query"].tolist(), p["text"].tolist()),
                    "neg": model.featurize(n["query"].tolist(), n["text"].tolist())}
        for side in ("pos", "neg"):
            assert item[side].keys() == expected[side].keys()
            assert all(torch.equal(item[side][k], expected[side][k]) for k in expected[side])
    else:
        queries = [q for q in p["query"] for _ in range(2)]
        texts = [t for pair in zip(p["text"], n["text"]) for t in pair]
        expected = model.featurize(queries, texts)
        assert all(torch.equal(item["feats"][k], expected[k]) for k in expected)
        assert item["labels"].tolist() == [1, 0, 1, 0, 1, 0]


def test_stored_tokens_of_another_set_are_refused():
    data = _instances(6)
    model = get("knrm")(embeddings="bundled", maxqlen=4, maxdoclen=32)
    other = model.encode_docs(["river bank"])
    other.keys = ["elsewhere"]
    pos, neg = pairs_of(data)
    with pytest.raises(Exception, match="no stored tokens"):
        PairBatches.of(model, pos, neg, [np.arange(2)], other)


def test_loader_workers_auto_trains_on_the_cpu_alone_and_feeds_cuda():
    assert loader_workers("auto", "cpu") == 0
    assert 0 <= loader_workers("auto", "cuda") <= 4
    assert loader_workers(3, "cpu") == 3


def test_every_seed_of_a_set_reads_one_tokens_artifact_and_every_size_one_per_corpus(small_cfg):
    """The tokens stage is shared: the seeds (and No-Leakage corpora) of a training set read one artifact, the
    re-rankings of a corpus by every size, leakage and seed read one per model."""
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner

    r = runner(small_cfg, readonly=True)

    def tokens(stage, **p):
        return r.key(r.inputs(Ask.of(stage, model="knrm", **p))["tokens"])

    train = {tokens("train", corpus=c, leakage="none", size=128, seed=s) for c in ("toy_robust", "toy_core17")
             for s in (1, 2)}
    assert len(train) == 1
    assert tokens("train", corpus="toy_robust", leakage="msm", size=128, seed=1) not in train
    rerank = {tokens("rerank", corpus="toy_robust", leakage=lk, size=sz, seed=1) for lk in ("none", "msm", "test")
              for sz in (128, 256)}
    assert len(rerank) == 1


def test_the_loader_leaves_the_global_random_state_to_the_seed():
    """Dropout masks come from the global generator that set_seed fixed: creating and reading the loader must not
    draw from it (a DataLoader draws its workers' base seed from the global generator unless given its own), or
    every model with dropout would train differently from the seed's run without the loader."""
    data = _instances(6)
    model = get("knrm")(embeddings="bundled", maxqlen=4, maxdoclen=32)
    pos, neg = pairs_of(data)
    batches = PairBatches.of(model, pos, neg, [np.arange(2), np.arange(2, 4)])
    for workers in (0, 1):
        torch.manual_seed(5)
        before = torch.get_rng_state()
        list(batches.loader(workers))
        assert torch.equal(torch.get_rng_state(), before)
