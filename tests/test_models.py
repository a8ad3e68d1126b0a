"""The five re-rankers: hand-checked forward passes, learning, determinism, checkpoints, idf, interop."""

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from leakexp.runner.config import model_config
from leakexp.models import REGISTRY, load_checkpoint
from leakexp.models.base import ties_per_query
from leakexp.models.capreolus import IdfTable
from leakexp.models.duet import DUET
from leakexp.models.pacrr import PACRR, kmax_pooling
from leakexp.models.vectors import load_word_vectors
from leakexp.lib.trainer import Training, set_seed, train

WORDS = ["lyme", "tick", "hubble", "galaxy", "ferry", "ship", "bear", "forest"]
NEG_TEXT = "weather sports market economy city news"


def toy_task(n=48) -> pd.DataFrame:
    """Positives repeat the query's words; negatives are about something else."""
    rows = []
    for i in range(n):
        a, b = WORDS[i % 8], WORDS[(i + 3) % 8]
        rows += [(i, f"q{i}", f"{a} {b}", f"d{i}+", f"the {a} and the {b} report {a} {b}", 1, "filler", "msmarco"),
                 (i, f"q{i}", f"{a} {b}", f"d{i}-", NEG_TEXT, 0, "filler", "msmarco")]
    return pd.DataFrame(rows, columns=["pair", "qid", "query", "docno", "text", "label", "origin", "source"])


def toy_collection() -> list[str]:
    """The documents of a small test collection: its df table gives every model that reads idf its weights."""
    return [f"the {a} and the {b} report" for a in WORDS for b in WORDS] + [NEG_TEXT] * 8


@pytest.fixture(scope="module")
def idf_table():
    return IdfTable.from_docs(toy_collection())


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory):
    from leakexp.models.monot5 import train_embedded_tokenizer

    texts = [f"the {a} and the {b} report {c} weather sports market economy city news" for a in WORDS for b in WORDS
             for c in WORDS] * 3
    return str(train_embedded_tokenizer(texts, tmp_path_factory.mktemp("tiny-t5"), vocab_size=300))


def build(name, tiny_bert, tiny_t5, table=None, **kw):
    model = {
        "knrm": lambda: REGISTRY["knrm"](**dict(dict(maxdoclen=16), **kw)),
        "pacrr": lambda: REGISTRY["pacrr"](**dict(dict(maxdoclen=16), **kw)),
        "duet": lambda: REGISTRY["duet"](**dict(dict(maxdoclen=120, nhidden=19, dropoutrate=0.0), **kw)),
        "monobert": lambda: REGISTRY["monobert"](**dict(dict(checkpoint=tiny_bert, max_length=64), **kw)),
        "monot5": lambda: REGISTRY["monot5"](**dict(dict(checkpoint=tiny_t5, max_length=64), **kw)),
    }[name]()
    if getattr(model, "needs_idf", False):
        model.use_idf(table or IdfTable.from_docs(toy_collection()))
    return model


TRAIN = {"knrm": Training(batch_size=8, lr=1e-2), "pacrr": Training(batch_size=8, lr=3e-3),
         "duet": Training(batch_size=8, lr=3e-3), "monobert": Training(batch_size=8, lr=1e-3, optimizer="adamw"),
         "monot5": Training(batch_size=8, lr=3e-3, optimizer="adafactor")}
MODELS = ["knrm", "pacrr", "duet", "monobert", "monot5"]


def _margins(model, data):
    pos, neg = data[data.label == 1], data[data.label == 0]
    s_pos = torch.tensor(model.score(pos["query"].tolist(), pos.text.tolist()))
    s_neg = torch.tensor(model.score(neg["query"].tolist(), neg.text.tolist()))
    return s_pos - s_neg


@pytest.mark.parametrize("name", MODELS)
def test_training_lowers_the_loss_and_separates_positives(name, tiny_bert, tiny_t5):
    data = toy_task()
    set_seed(1)
    model = build(name, tiny_bert, tiny_t5)
    cfg = Training(**dict(vars(TRAIN[name]), epochs=6, decay="constant"))
    figs = train(model, data, seed=1, cfg=cfg, progress=False)
    margins = _margins(model, data)
    assert figs["updates"] == 6 * 6 and figs["epochs"] == 6.0
    assert figs["final_loss"] < figs["first_loss"]
    assert (margins > 0).float().mean() == 1.0  # every positive above its negative
    assert margins.mean() > 0.5


def _reference_train_config(name: str) -> Training:
    """The model file's own training settings (conf/model/<name>.yaml), one epoch."""
    return Training.of(model_config(name)["train"], {"epochs": 1})


@pytest.mark.parametrize("name", ["knrm", "pacrr", "duet", "monobert",
                                  pytest.param("monot5", marks=pytest.mark.slow)])  # 9 micro-batches of 32: ~20 s
def test_one_epoch_at_default_shapes_with_the_model_files_settings(name, tiny_bert, tiny_t5):
    """Default input shapes (800 document tokens; 512-token transformer inputs) and each model file's batch size,
    optimiser and schedule: one epoch sees every pair once, in ceil(pairs / (batch * accumulation)) updates."""
    cfg = _reference_train_config(name)
    n_pairs = 2 * cfg.batch_size * cfg.grad_accum + 3  # two full updates and a short last one
    data = toy_task(n_pairs)
    set_seed(2)
    defaults = {"knrm": {"maxdoclen": 800}, "pacrr": {"maxdoclen": 800},
                "duet": {"dropoutrate": 0.5, "maxdoclen": 800, "nhidden": 699},
                "monobert": {"max_length": 512}, "monot5": {"max_length": 512}}[name]
    model = build(name, tiny_bert, tiny_t5, **defaults)
    if name in ("knrm", "pacrr", "duet"):
        assert model.maxdoclen == 800
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = train(model, data, seed=2, cfg=cfg, progress=False)
    assert result["updates"] == 3 and result["epochs"] == 1.0
    assert result["instances"] == 2 * n_pairs
    per_update = np.diff([0] + list(result.history.pairs))
    if cfg.group_by_length:  # the short batch of 3 pairs lands anywhere, the seed orders batches
        assert sum(per_update) == n_pairs and sorted(per_update)[-1] == cfg.batch_size * cfg.grad_accum
    else:
        assert list(per_update) == [cfg.batch_size * cfg.grad_accum] * 2 + [3]
    assert result.history.loss.map(math.isfinite).all()
    peak = result.history.lr.max()
    if cfg.decay == "constant":  # KNRM / PACRR / DUET: Capreolus' constant LR, no warmup
        assert result.history.lr.tolist() == [cfg.lr] * 3
    else:
        assert peak <= cfg.lr + 1e-12 and result.history.lr.iloc[-1] < peak  # warmup then linear decay
    changed = [k for k, v in model.state_dict().items() if v.is_floating_point() and not torch.equal(v, before[k])]
    assert changed


@pytest.mark.parametrize("name", MODELS)
def test_same_seed_same_checkpoint_other_seed_differs(name, tiny_bert, tiny_t5, tmp_path):
    data = toy_task(8)

    def run(seed):
        set_seed(seed)
        m = build(name, tiny_bert, tiny_t5)
        train(m, data, seed=seed, cfg=TRAIN[name], progress=False)
        return {k: v.clone() for k, v in m.state_dict().items()}

    a, b, c = run(3), run(3), run(4)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point())


@pytest.mark.parametrize("name", MODELS)
def test_checkpoint_round_trip_in_one_call(name, tiny_bert, tiny_t5, tmp_path, idf_table):
    set_seed(0)
    m = build(name, tiny_bert, tiny_t5, table=idf_table)
    data = toy_task(4)
    m.save(tmp_path / name)
    back = load_checkpoint(tmp_path / name, idf=idf_table)
    q, d = data["query"].tolist(), data.text.tolist()
    assert torch.allclose(torch.tensor(m.score(q, d)), torch.tensor(back.score(q, d)), atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_scores_right_after_training_equal_the_reloaded_checkpoints(name, tiny_bert, tiny_t5, tmp_path, idf_table):
    """Same config, same scores, whatever ran before: re-ranking in the training process and re-ranking a stored
    model compute the same numbers, and training leaves the process-wide precision switches alone."""
    switches = lambda: (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,  # noqa: E731
                        torch.backends.cudnn.allow_tf32)
    before = switches()
    set_seed(5)
    m = build(name, tiny_bert, tiny_t5, table=idf_table)
    train(m, toy_task(16), seed=5, cfg=TRAIN[name], progress=False)
    assert switches() == before
    data = toy_task(8)
    q, d = data["query"].tolist(), data.text.tolist()
    in_process = m.score(q, d, batch_size=5)
    m.save(tmp_path / name)
    reloaded = load_checkpoint(tmp_path / name, idf=idf_table).score(q, d, batch_size=5)
    assert in_process == reloaded


def test_capreolus_checkpoints_hold_no_frozen_vectors_and_check_their_source(tmp_path):
    glove = tmp_path / "vectors.txt"
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(2000)] + WORDS
    glove.write_text("".join(f"{w} {' '.join(f'{x:.5f}' for x in rng.normal(size=50))}\n" for w in words))
    set_seed(0)
    m = REGISTRY["knrm"](embeddings=str(glove))  # default shapes: 800 document tokens
    m.save(tmp_path / "ckpt")
    state = torch.load(tmp_path / "ckpt" / "model.pt", weights_only=True)
    assert "embedding.weight" not in state and set(state) == {"mus", "sigmas", "combine.weight", "combine.bias"}
    meta = json.loads((tmp_path / "ckpt" / "model.json").read_text())["embeddings"]
    assert meta["sha256"] == load_word_vectors(str(glove)).content_hash and meta["shape"] == [len(words) + 1, 50]
    # loading reads the vectors once per process: the loaded model shares the cached matrix
    back = load_checkpoint(tmp_path / "ckpt")
    assert back.embedding.weight.data_ptr() == m.embedding.weight.data_ptr()
    assert torch.equal(back.combine.weight, m.combine.weight)
    # the source changed (a new process would read the new file): loading fails and says why
    lines = glove.read_text().splitlines()
    lines[0] = "w0 " + " ".join(["0.5"] * 50)
    glove.write_text("\n".join(lines) + "\n")
    load_word_vectors.cache_clear()
    try:
        with pytest.raises(ValueError, match="trained with word vectors .* restore the original file or retrain"):
            load_checkpoint(tmp_path / "ckpt")
    finally:
        load_word_vectors.cache_clear()


def test_demo_knrm_checkpoint_is_under_one_megabyte(tmp_path):
    set_seed(0)
    REGISTRY["knrm"]().save(tmp_path / "knrm")  # the demo's KNRM: bundled MiniLM vectors, 800 doc tokens
    size = sum(f.stat().st_size for f in (tmp_path / "knrm").iterdir())
    assert size < 1_000_000, size


def test_finetuned_embeddings_are_stored_and_do_not_touch_the_shared_vectors(tmp_path):
    set_seed(0)
    shared = torch.from_numpy(load_word_vectors("bundled").matrix)
    m = REGISTRY["knrm"](maxdoclen=16, finetune=True)
    assert m.embedding.weight.requires_grad and m.embedding.weight.data_ptr() != shared.data_ptr()
    with torch.no_grad():
        m.embedding.weight[5] += 1.0
    m.save(tmp_path / "ft")
    back = load_checkpoint(tmp_path / "ft")
    assert torch.equal(back.embedding.weight, m.embedding.weight)
    assert not torch.equal(torch.from_numpy(load_word_vectors("bundled").matrix)[5], m.embedding.weight[5])


# -- idf of the collection being ranked ---------------------------------------------------------------------
def test_idf_table_counts_documents_like_anserini(tmp_path):
    table = IdfTable.from_docs(["Lyme ticks", "the tick's bite", "lyme lyme disease", "forest"])
    assert table.n_docs == 4 and table.df == {"lyme": 2, "ticks": 1, "the": 1, "tick": 1, "bite": 1, "disease": 1,
                                              "forest": 1}
    # Anserini's get_idf: max(0, ln(1 + (N - df + 0.5) / (df + 0.5)))
    assert table.idf("lyme") == pytest.approx(math.log(1 + 2.5 / 2.5))
    assert table.idf("unseen") == pytest.approx(math.log(1 + 4.5 / 0.5))
    assert table.batch(["lyme unseen"], 4).tolist()[0] == pytest.approx([math.log(2), math.log(10), 0.0, 0.0])
    path = table.save(tmp_path / "df.parquet")
    assert IdfTable.load(path) == table
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "other.parquet")
    with pytest.raises(ValueError, match="not a leakexp df table"):
        IdfTable.load(tmp_path / "other.parquet")


@pytest.mark.parametrize("kw", [{"name": "duet"}, {"name": "pacrr", "idf_zero_quirk": False}])
def test_a_model_that_reads_idf_without_a_table_fails_clearly(kw):
    kw = dict(kw)
    name = kw.pop("name")
    m = REGISTRY[name](maxdoclen=120, nhidden=19, **kw) if name == "duet" else REGISTRY[name](maxdoclen=16, **kw)
    assert m.needs_idf
    with pytest.raises(RuntimeError, match="no df table.*IdfTable.from_docs.*use_idf"):
        m.featurize(["lyme tick"], ["the lyme report"])
    with pytest.raises(RuntimeError, match="no df table"):
        train(m, toy_task(4), seed=0, cfg=Training(batch_size=2), progress=False)


def test_idf_no_longer_depends_on_the_training_set(idf_table):
    """DUET's idf comes from the collection's df table, whatever the training set's size or leakage."""
    small, large = toy_task(4), toy_task(16)
    large.loc[large.label == 1, "text"] = "lyme " * 5  # many more training documents with 'lyme'
    weights = []
    for data in (small, large):
        set_seed(0)
        m = DUET(maxdoclen=120, nhidden=19).use_idf(idf_table)
        train(m, data, seed=0, cfg=Training(batch_size=4), progress=False)
        weights.append(m.featurize(["lyme forest"], ["x"])["idf"])
    expected = [idf_table.idf("lyme"), idf_table.idf("forest"), 0.0, 0.0]
    assert weights[0].tolist()[0] == pytest.approx(expected) and torch.equal(weights[0], weights[1])


# -- PACRR --------------------------------------------------------------------------------------------------
def test_kmax_pooling_keeps_the_k_largest_in_descending_order():
    x = torch.tensor([[[0.125, 0.75, 0.25, 0.75, 0.5]]])
    assert kmax_pooling(x, 2).tolist() == [[[0.75, 0.75]]]
    assert kmax_pooling(x, 3).tolist() == [[[0.75, 0.75, 0.5]]]


def test_pacrr_trimmed_padding_equals_full_padding():
    set_seed(0)
    m = PACRR(maxdoclen=40)
    with torch.no_grad():
        for conv in m.convs:
            conv.bias.uniform_(-0.5, 0.5)  # make the padded windows' value matter
    queries, docs = ["lyme disease ticks"] * 2, ["ticks carry lyme disease", "the short one"]
    feats = m.featurize(queries, docs)
    d_tokens = m.encode_docs(docs)
    full = dataclasses.replace(m.collator(), trim=False)(m.encode_queries(queries, d_tokens), d_tokens)
    assert torch.equal(full["d"][:, :4], feats["d"]) and (full["d"][:, 4:] == 0).all()
    assert feats["d"].shape[1] == 4
    with torch.no_grad():
        assert torch.allclose(m(**feats), m(**full), atol=1e-6)
    # the quirk: the idf feature is a constant softmax over 4 positions, 0.25 each
    assert torch.allclose(torch.softmax(feats["idf"], dim=1), torch.full((2, 4), 0.25))


def test_pacrr_without_the_quirk_uses_the_collections_idf(idf_table):
    m = PACRR(maxdoclen=16, idf_zero_quirk=False).use_idf(idf_table)
    f = m.featurize(["lyme news"], ["the lyme report"])
    assert f["idf"].tolist()[0] == pytest.approx([idf_table.idf("lyme"), idf_table.idf("news"), 0, 0])


# -- DUET ---------------------------------------------------------------------------------------------------
def test_duet_local_branch_by_hand():
    set_seed(0)
    m = DUET(maxdoclen=120, nhidden=19, dropoutrate=0.0)
    q = torch.tensor([[5, 7, 0, 0]])
    d = torch.zeros(1, 120, dtype=torch.long)
    d[0, :3] = torch.tensor([5, 9, 5])
    idf = torch.tensor([[2.0, 1.0, 0.0, 0.0]])
    with torch.no_grad():
        m.local_conv.weight.zero_()
        m.local_conv.weight[0, 0, 0, 0] = 1.0  # filter 0 looks at doc position 0
        m.local_conv.weight[1, 0, 0, 2] = 0.5  # filter 1 at position 2
        m.local_conv.bias.zero_()
        lin1, lin2 = m.local_mlp[0], m.local_mlp[3]
        lin1.weight.zero_(), lin1.bias.zero_(), lin2.weight.fill_(1.0), lin2.bias.zero_()
        lin1.weight[0, 0] = 1.0  # (filter 0, query term 0)
        lin1.weight[0, 4] = 3.0  # (filter 1, query term 0): filter-major flatten
        # exact matches of query term 0 (idf 2) at doc positions 0 and 2: filter 0 -> 2.0, filter 1 -> 0.5 * 2.0
        assert m.local(q, d, idf).item() == pytest.approx(1.0 * 2.0 + 3.0 * 1.0)


def test_duet_rejects_inconsistent_lengths():
    with pytest.raises(ValueError, match="nhidden=699 must equal maxdoclen - 101 = 399"):
        DUET(maxdoclen=500)


def test_duet_featurize_never_touches_parameters(idf_table):
    """Parameters on the `meta` device (no data, like a GPU the texts never reach): featurize still gives CPU
    ids, and only forward looks vectors up, on the parameters' device."""
    m = DUET(maxdoclen=120, nhidden=19).use_idf(idf_table)
    m.to("meta")
    feats = m.featurize(["the borreliosis", "report"], ["borreliosis and the report", "xyzzy the"])
    assert all(v.device.type == "cpu" for v in feats.values())
    assert feats["q"].dtype == torch.long and feats["d"].dtype == torch.long
    assert feats["q"][0, 1] == -1 and feats["d"][0, 0] == -1 and feats["d"][1, 0] == -2  # batch-local OOV ids
    assert feats["q"][0, 0] == m.vectors.vocab["the"]
    assert torch.equal(feats["oov"][0], m.oov_vector("borreliosis"))  # a function of the word alone
    out = m(**{k: v.to("meta") for k, v in feats.items()})
    assert out.device.type == "meta" and out.shape == (2,)


def test_duet_unknown_words_get_their_seeded_vector_in_forward(idf_table):
    m = DUET(maxdoclen=120, nhidden=19).use_idf(idf_table)
    feats = m.featurize(["report borreliosis"], ["xyzzy borreliosis report"])
    q_emb, d_emb = m.embed(feats["q"], feats["oov"]), m.embed(feats["d"], feats["oov"])
    report = m.embedding.weight[m.vectors.vocab["report"]]
    assert torch.equal(q_emb[0, 0], report) and torch.equal(q_emb[0, 1], m.oov_vector("borreliosis"))
    assert torch.equal(d_emb[0, 0], m.oov_vector("xyzzy")) and torch.equal(d_emb[0, 1], q_emb[0, 1])
    assert d_emb[0, 3:].abs().sum() == 0  # padding


def test_duet_distributed_branch_has_capreolus_shapes(tmp_path, idf_table):
    """At the reference shapes (4 query tokens, 800 document tokens, 300-d vectors; docs/models.md §4): query branch
    (B,10,2,1) -> pool (B,10,1,1) -> (B,10); document branch (B,10,798,1) -> pool(100) (B,10,699,1) ->
    conv 10x1 (B,10,1,699); combination (B,10,1) -> (B,). Run on `meta` tensors: shapes without the arithmetic."""
    glove = tmp_path / "glove300.txt"
    glove.write_text("".join(f"{w} {' '.join(['0.1'] * 300)}\n" for w in WORDS))
    m = DUET(embeddings=str(glove)).use_idf(idf_table)  # Capreolus defaults: maxdoclen 800, nhidden 699
    shapes = {}
    for name in ("q_conv", "q_pool", "q_fc", "d_conv", "d_pool", "d_conv2", "comb_fc", "out_fc", "local_conv"):
        getattr(m, name).register_forward_hook(lambda mod, inp, out, name=name: shapes.__setitem__(name, out.shape))
    feats = m.featurize(["lyme tick"] * 3, [" ".join(WORDS * 120)] * 3)
    assert feats["d"].shape == (3, 800)
    m.to("meta")
    out = m(**{k: v.to("meta") for k, v in feats.items()})
    assert out.shape == (3,)
    assert shapes == {"local_conv": (3, 10, 4, 1), "q_conv": (3, 10, 2, 1), "q_pool": (3, 10, 1, 1),
                      "q_fc": (3, 10), "d_conv": (3, 10, 798, 1), "d_pool": (3, 10, 699, 1),
                      "d_conv2": (3, 10, 1, 699), "comb_fc": (3, 10, 1), "out_fc": (3, 1)}


# -- monoT5 and monoBERT ------------------------------------------------------------------------------------
def test_monot5_two_logit_scoring_equals_the_full_model(tiny_t5):
    set_seed(0)
    m = REGISTRY["monot5"](checkpoint=tiny_t5)
    m.eval()
    f = m.featurize(["lyme tick", "ferry"], ["the lyme and the tick report", "weather news"])
    with torch.no_grad():
        start = torch.zeros(2, 1, dtype=torch.long)
        full = m.t5(**f, decoder_input_ids=start).logits[:, 0, [m.false_id, m.true_id]]
        assert torch.allclose(m._two_logits(**f), full, atol=1e-5)
        assert torch.allclose(m(**f), torch.log_softmax(full, -1)[:, 1], atol=1e-5)
    assert m.tokenizer.convert_ids_to_tokens([m.true_id, m.false_id]) == ["▁true", "▁false"]


def test_monot5_checkpoint_scores_like_pyterrier_t5(tiny_t5, tmp_path):
    from pyterrier_t5 import MonoT5ReRanker

    set_seed(0)
    m = REGISTRY["monot5"](checkpoint=tiny_t5)
    train(m, toy_task(8), seed=0, cfg=TRAIN["monot5"], progress=False)
    m.save(tmp_path / "ckpt")
    theirs = MonoT5ReRanker(tok_model=str(tmp_path / "ckpt"), model=str(tmp_path / "ckpt"), batch_size=1,
                            verbose=False, device="cpu")
    data = toy_task(8)
    run = data.assign(qid=data.qid, score=0.0)[["qid", "query", "docno", "text"]]
    ref = theirs.transform(run).set_index("docno").score
    ours = load_checkpoint(tmp_path / "ckpt").transformer(batch_size=16)(run).set_index("docno").score
    assert (ours - ref.loc[ours.index]).abs().max() < 1e-4


def test_monot5_over_512_tokens_pygaggle_and_pyterrier_t5(tiny_t5, tmp_path):
    """Inputs longer than 512 tokens. ``truncation=pygaggle`` (the default, the paper's PyGaggle) tokenises the
    whole prompt plus ' </s>' with truncation=True, max_length=512: the tail, 'Relevant:' included, is cut and
    </s> ends the 512 tokens. ``truncation=keep_prompt`` cuts the document so that 'Relevant:' </s> always fits,
    as pyterrier-t5's MonoT5ReRanker does, and scores like it at batch_size=1. (pyterrier-t5 at batch_size > 1
    keeps a shorter row's own </s> before the prompt, so its scores depend on the batch; leakexp's do not.)
    On purpose the default differs from pyterrier-t5 on long inputs: the paper used PyGaggle."""
    from pyterrier_t5 import MonoT5ReRanker
    from transformers import T5Tokenizer

    set_seed(0)
    m = REGISTRY["monot5"](checkpoint=tiny_t5)
    m.save(tmp_path / "ckpt")
    long_doc = " ".join(WORDS * 100)  # far over 512 pieces
    queries, docs = ["lyme tick", "ferry ship"], [long_doc, "the ferry report"]
    tok = T5Tokenizer.from_pretrained(tiny_t5)
    pyg = m.featurize(queries, docs)
    for i, (q, d) in enumerate(zip(queries, docs)):
        # PyGaggle (transformers 3/4, slow tokenizer): "... Relevant: </s>" with truncation=True, max_length=512
        # keeps the text's </s> without adding a second one, and after truncation ends the 511 kept pieces with </s>
        ids = tok(f"Query: {q} Document: {d} Relevant: </s>", add_special_tokens=False)["input_ids"]
        expected = ids[:511] + [tok.eos_token_id] if len(ids) > 512 else ids
        n = int(pyg["attention_mask"][i].sum())
        assert pyg["input_ids"][i, :n].tolist() == expected
    assert pyg["input_ids"].shape[1] == 512
    relevant = tok("Relevant:")["input_ids"][:-1]
    row = pyg["input_ids"][0].tolist()
    assert row[-1] == tok.eos_token_id and row[-1 - len(relevant):-1] != relevant  # the prompt's end is lost

    kp = REGISTRY["monot5"](checkpoint=str(tmp_path / "ckpt"), truncation="keep_prompt")
    kfeat = kp.featurize(queries, docs)
    assert kfeat["input_ids"][0, -1 - len(relevant):-1].tolist() == relevant and kfeat["input_ids"].shape[1] == 512
    run = pd.DataFrame({"qid": ["1", "2"], "query": queries, "docno": ["a", "b"], "text": docs})
    theirs = MonoT5ReRanker(tok_model=str(tmp_path / "ckpt"), model=str(tmp_path / "ckpt"), batch_size=1,
                            verbose=False, device="cpu").transform(run).set_index("docno").score
    keep = pd.Series(kp.score(queries, docs), index=["a", "b"])
    default = pd.Series(load_checkpoint(tmp_path / "ckpt").score(queries, docs), index=["a", "b"])
    assert (keep - theirs.loc[keep.index]).abs().max() < 1e-4  # keep_prompt = pyterrier-t5
    assert default["b"] == pytest.approx(theirs["b"], abs=1e-4)  # short input: the same
    assert abs(default["a"] - theirs["a"]) > 1e-4  # long input: PyGaggle lost 'Relevant:'


def test_monobert_checkpoint_reloads_with_auto_model(tiny_bert, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    set_seed(0)
    m = REGISTRY["monobert"](checkpoint=tiny_bert, max_length=64)
    m.save(tmp_path / "bert")
    auto = AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "bert"))
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "bert"))
    enc = tok(["lyme"], ["the lyme report"], return_tensors="pt")
    with torch.no_grad():
        expected = torch.log_softmax(auto(**enc).logits, -1)[0, 1].item()
    assert m.score(["lyme"], ["the lyme report"])[0] == pytest.approx(expected, abs=1e-5)
    assert auto.config.num_labels == 2


def test_monobert_layers_keeps_the_checkpoints_first_layers_and_reloads_with_them(tiny_bert, tmp_path):
    """The demo's ``layers``: the same classifier over the checkpoint's first N encoder layers, their weights the
    checkpoint's; the saved model reloads with N layers and scores the same."""
    set_seed(0)
    full = REGISTRY["monobert"](checkpoint=tiny_bert, max_length=64)
    set_seed(0)
    cut = REGISTRY["monobert"](checkpoint=tiny_bert, max_length=64, layers=1)
    assert len(full.bert.bert.encoder.layer) == 2 and len(cut.bert.bert.encoder.layer) == 1
    assert torch.equal(cut.bert.bert.encoder.layer[0].output.dense.weight,
                       full.bert.bert.encoder.layer[0].output.dense.weight)
    assert cut.score(["lyme"], ["the lyme report"]) != full.score(["lyme"], ["the lyme report"])
    cut.save(tmp_path / "cut")
    again = load_checkpoint(tmp_path / "cut")
    assert len(again.bert.bert.encoder.layer) == 1 and again.hparams["layers"] == 1
    assert again.score(["lyme"], ["the lyme report"]) == pytest.approx(cut.score(["lyme"], ["the lyme report"]),
                                                                       abs=1e-6)


def test_transformers_use_sdpa_attention(tiny_bert, tiny_t5):
    assert build("monobert", tiny_bert, tiny_t5).bert.config._attn_implementation == "sdpa"
    assert build("monot5", tiny_bert, tiny_t5).t5.config._attn_implementation == "sdpa"


def test_nan_loss_stops_training():
    from leakexp.lib.trainer import TrainingError

    set_seed(0)
    m = REGISTRY["knrm"](maxdoclen=16)
    with torch.no_grad():
        m.combine.weight.fill_(float("nan"))
    with pytest.raises(TrainingError, match="loss became nan"):
        train(m, toy_task(4), seed=0, cfg=Training(batch_size=2), progress=False)


# -- bf16 autocast and ties ---------------------------------------------------------------------------------
TIE_VOCAB = ("lyme tick hubble galaxy ferry ship bear forest river mountain city market weather sports economy news "
             "report health disease doctor travel ocean island music film school student water energy solar wind "
             "history war peace law court bank money food farm animal bird fish tree flower garden road car").split()


def tie_run(n_queries: int = 6, n_docs: int = 40, seed: int = 0) -> pd.DataFrame:
    """A re-ranking of distinct documents (random word sequences) for a few two-word queries."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_queries):
        q = " ".join(rng.choice(TIE_VOCAB, 2, replace=False))
        for j in range(n_docs):
            d = " ".join(rng.choice(TIE_VOCAB, int(rng.integers(6, 16))))
            rows.append((f"q{i}", q, f"d{i}-{j:02d}", d))
    return pd.DataFrame(rows, columns=["qid", "query", "docno", "text"])


def test_ties_per_query_counts_documents_sharing_a_score():
    run = pd.DataFrame({"qid": ["a"] * 5 + ["b"] * 3, "score": [1.0, 1.0, 2.0, 3.0, 3.0, 0.5, 0.25, 0.125]})
    assert ties_per_query(run) == pytest.approx((4 + 0) / 2)


@pytest.mark.parametrize("name", MODELS)
def test_bf16_autocast_makes_no_more_ties_than_fp32(name, tiny_bert, tiny_t5):
    """Under bf16 autocast (CPU autocast here; CUDA autocast is the same policy) the score heads, the log-softmax
    and KNRM's cosine kernel stay in fp32, so a ranking has about as many tied documents as in fp32."""
    set_seed(0)
    model = build(name, tiny_bert, tiny_t5, **({"maxdoclen": 800} if name in ("knrm", "pacrr") else {}))
    run = tie_run()
    q, d = run["query"].tolist(), run.text.tolist()
    fp32 = run.assign(score=model.score(q, d, batch_size=16))
    from torch.nn.attention import SDPBackend, sdpa_kernel

    # SDPA's math kernel: the same on every CPU (its fused bf16 kernel needs AVX-512: ATEN_CPU_CAPABILITY=default has
    # none, as many a CPU)
    with torch.autocast("cpu", dtype=torch.bfloat16), sdpa_kernel([SDPBackend.MATH]):
        bf16 = run.assign(score=model.score(q, d, batch_size=16))
    assert fp32.score.nunique() > 0.9 * len(run)  # distinct documents, distinct fp32 scores
    assert ties_per_query(bf16) <= ties_per_query(fp32) + 1.0
    # the same model at bf16's resolution (the tiny random BERT's scores span little, so its bf16 noise is larger)
    assert np.corrcoef(fp32.score, bf16.score)[0, 1] > 0.7


@pytest.mark.parametrize("name", MODELS)
def test_the_loss_is_fp32_under_bf16_autocast(name, tiny_bert, tiny_t5):
    import numpy as np

    from leakexp.lib.trainer import PairBatches, batch_loss, pairs_of

    set_seed(0)
    model = build(name, tiny_bert, tiny_t5, **({"dropoutrate": 0.0} if name == "duet" else {}))
    model.eval()  # no dropout: the two losses see the same network
    pos, neg = pairs_of(toy_task(8))
    batch = PairBatches.of(model, pos, neg, [np.arange(len(pos))])[0]
    ref = batch_loss(model, batch, "cpu", False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = batch_loss(model, batch, "cpu", False)
    assert low.dtype == torch.float32 and ref.dtype == torch.float32
    assert low.item() == pytest.approx(ref.item(), rel=0.05, abs=0.02)


def _monot5_batch(tiny_t5):
    """A tiny monoT5, three query-document pairs, their labels and the true/false target tokens they train on."""
    set_seed(0)
    m = REGISTRY["monot5"](checkpoint=tiny_t5).eval()
    f = m.featurize(["lyme tick", "ferry", "bear"], ["the lyme and the tick report", "weather news", "bear forest"])
    labels = torch.tensor([1, 0, 1])
    target = torch.tensor([[m.true_id if y else m.false_id, m.tokenizer.eos_token_id] for y in labels.tolist()])
    return m, f, labels, target


def test_monot5_loss_equals_the_hf_loss_with_labels(tiny_t5):
    m, f, labels, target = _monot5_batch(tiny_t5)
    with torch.no_grad():
        assert m.pointwise_loss(f, labels).item() == pytest.approx(m.t5(**f, labels=target).loss.item(), abs=1e-6)


def test_monot5_z_loss_is_mesh_tfs_term_on_each_target_token(tiny_t5):
    """Mesh TF (mesh_tensorflow/layers.py lines 1111-1116, transformer.py lines 841-851): each target token's loss is
    its cross-entropy plus z_loss * log_z^2, log_z the logsumexp of its logits over the vocabulary, then averaged
    over the tokens; here computed by hand in float64 from the model's full-vocabulary logits."""
    m, f, labels, target = _monot5_batch(tiny_t5)
    with torch.no_grad():
        logits = m.t5(**f, labels=target).logits.double().numpy()  # (3, 2, vocabulary)
        plain, with_z = m.pointwise_loss(f, labels).item(), m.pointwise_loss(f, labels, z_loss=1e-4).item()
    top = logits.max(axis=-1)
    log_z = top + np.log(np.exp(logits - top[..., None]).sum(axis=-1))  # (3, 2)
    token = log_z - np.take_along_axis(logits, target.numpy()[..., None], axis=-1)[..., 0]
    assert logits.shape[-1] == m.t5.config.vocab_size and np.abs(log_z).min() > 1  # the term shows in float32
    assert plain == pytest.approx(token.mean(), rel=1e-6)
    assert with_z == pytest.approx((token + 1e-4 * log_z**2).mean(), rel=1e-6)
    assert with_z - plain == pytest.approx(1e-4 * (log_z**2).mean(), rel=1e-3)


def test_the_trainer_applies_z_loss_to_monot5_only(tiny_t5):
    cfg = Training(batch_size=4, lr=1e-3, optimizer="adafactor_mesh", decay="constant", updates=2)
    losses = []
    for z in (0.0, 1e-4):
        set_seed(0)
        model = REGISTRY["monot5"](checkpoint=tiny_t5, max_length=64)
        losses.append(train(model, toy_task(8), seed=0, cfg=cfg.model_copy(update=dict(z_loss=z)), progress=False)
                      .history.loss.iloc[0])
    assert losses[1] - losses[0] > 1e-3  # 1e-4 * log_z^2, log_z ~ log(vocabulary size) at a random initialisation
    from leakexp.lib.trainer import TrainingError

    with pytest.raises(TrainingError, match="knrm: z_loss=0.0001 is Mesh TF's term"):
        train(build("knrm", None, tiny_t5), toy_task(8), seed=0, cfg=cfg.model_copy(update=dict(z_loss=1e-4)),
              progress=False)
