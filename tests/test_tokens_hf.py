"""monoBERT and monoT5 read stored token ids: the collated tensors equal, bit for bit, what the tokenizer gives on
the texts of each batch (the code below marked "as before"), on the toy world's texts and on hazards."""

from __future__ import annotations

import json
import pickle
import random

import numpy as np
import pytest
import torch

from leakexp.models.monobert import MonoBERT, longest_first
from leakexp.models.monot5 import PROMPT, MonoT5, train_embedded_tokenizer
from leakexp.models.tokens import Tokens
from leakexp.lib.trainer import set_seed

# -- the texts ----------------------------------------------------------------------------------------------
HAZARDS = [
    "", " ", "   ", "\t\n", "lyme  disease", " leading space", "trailing space ", "many   inner    spaces",
    "nbsp\u00a0between\u00a0words", "\u00a0nbsp at the ends\u00a0", "em\u2003space\u3000ideographic\u2009thin",
    "tab\tand\nnewline\r\nand\rcr", "\u2028line sep\u2029para sep\x85nel",
    "zero\u200bwidth\u200c\u200djoiners\ufeff", "\u0301combining first", "caf\u00e9 cafe\u0301 e\u0301\u0302\u0303",
    "\u0903spacing mark", "end with prepend\u0600", "\u0600", "\u06dd\u0661",
    "\ufb01ligature \uff21\uff22\uff23 fullwidth \u2460 circled \u00bd half \u2126 ohm",  # NFKC changes these
    "\uff76\uff9e halfwidth kana \u3099", "日本語のテキストと漢字", "Привет, мир! Ёлка", "مرحبا بالعالم", "שלום עולם",
    "हिन्दी पाठ", "한국어 \u1100\u1161\u11a8 jamo", "emoji 👍🏽 👨‍👩‍👧 🇫🇷🇩🇪", "soft\u00adhyphen",
    "\x00nul\x07bell\x1bctrl", "curly “quotes” and ‘apostrophes’ it’s", "Query: Document: Relevant:",
    "</s> <pad> <unk> [CLS] [SEP] [PAD]", "▁true ▁Query: ▁Relevant:", "true false", "UPPER lower MiXeD 123 4.5e6",
    "x", "a" * 300, "supercalifragilisticexpialidocious " * 20,
]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The toy world's documents (the long ones, the empty one, and others) and queries (training queries,
    topic titles and variants), plus the hazards."""
    from leakexp.data.files import read_trec_topics
    from leakexp.data.toy import generate

    root = tmp_path_factory.mktemp("toy")
    figures = generate(root, seed=42, queries_per_source=300)
    rng = random.Random(0)
    docs, queries, special = [], [], set()
    for name, h in figures["hazards"]["long_docs"].items():
        special.update(h)
    special.update(d for ds in figures["hazards"]["empty_docs"].values() for d in ds)
    special.add(figures["hazards"]["train_empty_doc"])
    for part in ("train", "robust", "core17", "core18"):
        rows = [json.loads(line) for line in (root / part / "docs.jsonl").read_text(encoding="utf-8").splitlines()]
        docs += [r["text"] for r in rows if r["docno"] in special] + [r["text"] for r in rng.sample(rows, 40)]
        if part == "train":
            for f in ("msmarco", "orcas"):
                lines = (root / part / f"{f}.queries.tsv").read_text(encoding="utf-8").splitlines()
                queries += [line.split("\t", 1)[1] for line in rng.sample(lines, 40)]
        else:
            queries += [t.title for t in read_trec_topics(root / part / "topics.txt")]
            queries += [line.split("\t", 1)[1] for line in
                        (root / part / "variants.tsv").read_text(encoding="utf-8").splitlines()[:20]]
    assert "" in docs and max(len(d.split()) for d in docs) > 600
    return {"docs": docs, "queries": queries, "vocab_texts": docs + queries}


def pairs(toy) -> tuple[list[str], list[str]]:
    """Aligned (query, document) texts: toy pairs, every hazard against every hazard, long queries (about 600
    WordPieces) with empty, short and long documents (over 1,000 WordPieces), empty queries and documents."""
    rng = random.Random(1)
    docs, queries = toy["docs"], toy["queries"]
    long_docs = sorted(docs, key=len)[-4:]
    long_queries = [" ".join(rng.choices(q.split() or ["x"], k=300)) for q in queries[:2]] + ["lyme " * 300]
    qs, ds = [], []
    for q in queries[:60]:
        qs += [q, q]
        ds += rng.sample(docs, 2)
    for h in HAZARDS:
        qs += [h] * len(HAZARDS) + [h, h]
        ds += HAZARDS + [long_docs[0], rng.choice(docs)]
    for q in long_queries:
        qs += [q] * 5
        ds += ["", "short document", rng.choice(docs), long_docs[0], q]
    qs += [""] * 4 + ["lyme disease"]
    ds += ["", long_docs[-1], "a b c", " " * 5, ""]
    # both texts over max_length - 3, the query the longer one: only the full lengths tell which is cut more
    qs += ["lyme " * 300, "the " * 550, "the " * 520]
    ds += ["the " * 550, "lyme " * 300, "the " * 520]
    return qs, ds


# -- the models ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def t5_dir(toy, tmp_path_factory):
    """The embedded monoT5: a SentencePiece vocabulary trained on the toy world's text, random weights."""
    return str(train_embedded_tokenizer(toy["vocab_texts"], tmp_path_factory.mktemp("t5"), vocab_size=4000))


def bert(path, max_length):
    set_seed(0)
    return MonoBERT(checkpoint=path, max_length=max_length).eval()


def t5(path, max_length, truncation):
    set_seed(0)
    return MonoT5(checkpoint=path, max_length=max_length, truncation=truncation).eval()


# -- the tensors as before: the tokenizer on the texts of each batch -----------------------------------------
def bert_before(model, queries, docs):
    return dict(model.tokenizer(queries, docs, max_length=model.hparams["max_length"], truncation=True,
                                padding="longest", return_tensors="pt"))


def t5_before(model, queries, docs):
    max_length = model.hparams["max_length"]
    if model.hparams["truncation"] == "pygaggle":
        return dict(model.tokenizer([PROMPT.format(q=q, d=d) for q, d in zip(queries, docs)], max_length=max_length,
                                    truncation=True, padding="longest", return_tensors="pt"))
    head = model.tokenizer([f"Query: {q} Document: {d}" for q, d in zip(queries, docs)])["input_ids"]
    keep = max_length - len(model.prompt_ids)
    rows = [ids[:-1][:keep] + model.prompt_ids for ids in head]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    return {"input_ids": ids,
            "attention_mask": (torch.arange(width)[None, :] < torch.tensor([len(r) for r in rows])[:, None]).long()}


def assert_same(ours: dict, ref: dict, where: str = ""):
    assert list(ours) == list(ref), where
    for k in ref:
        assert ours[k].dtype == ref[k].dtype and ours[k].shape == ref[k].shape, (where, k, ours[k].shape, ref[k].shape)
        assert torch.equal(ours[k], ref[k]), (where, k)


def batches(n, size, rng):
    """Batches of mixed composition (a shuffled order, so rows of many lengths meet in one batch)."""
    order = list(range(n))
    rng.shuffle(order)
    return [order[s : s + size] for s in range(0, n, size)]


MODELS = [("bert", None), ("t5", "pygaggle"), ("t5", "keep_prompt")]


def build(kind, truncation, max_length, tiny_bert, t5_dir):
    return bert(tiny_bert, max_length) if kind == "bert" else t5(t5_dir, max_length, truncation)


def before(model, queries, docs):
    return (bert_before if isinstance(model, MonoBERT) else t5_before)(model, queries, docs)


# -- the tests -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("max_length", [512, 16])
@pytest.mark.parametrize("kind,truncation", MODELS)
def test_stored_tokens_collate_to_the_tensors_of_the_tokenizer(kind, truncation, max_length, toy, tiny_bert, t5_dir,
                                                               tmp_path):
    """Documents encoded once (through the class method, from the settings alone), stored and loaded, queries
    encoded once; every batch gathered from them equals the tokenizer on the batch's texts (featurize too)."""
    model = build(kind, truncation, max_length, tiny_bert, t5_dir)
    qs, ds = pairs(toy)
    utexts, di = np.unique(np.array(ds, dtype=object), return_inverse=True)
    uq, qi = np.unique(np.array(qs, dtype=object), return_inverse=True)
    docs = type(model).document_tokens(model.hparams, utexts.tolist())
    mine = model.encode_docs(utexts.tolist())
    assert np.array_equal(docs.ids, mine.ids) and np.array_equal(docs.offsets, mine.offsets)
    assert np.array_equal(docs.full, mine.full) and docs.ids.dtype == np.int32
    docs.keys = [f"d{i}" for i in range(len(docs))]
    docs.save(tmp_path, "docs")
    docs = Tokens.load(tmp_path, "docs")
    queries = model.encode_queries(uq.tolist(), docs)
    collate = model.collator()
    revived = pickle.loads(pickle.dumps(collate))
    assert revived == collate and not any(isinstance(v, torch.nn.Module) for v in vars(collate).values())
    rng = random.Random(max_length)
    # every pair in batches of 32; some batches of 1 and 7 (the tokenizer, truncating long pairs, is slow at small
    # max_length: it builds every overflowing window of both texts)
    for size, most in ((32, None), (7, 40), (1, 100)):
        for b in batches(len(qs), size, rng)[:most]:
            bq, bd = [qs[i] for i in b], [ds[i] for i in b]
            ref = before(model, bq, bd)
            feats = collate(queries.take(qi[b]), docs.take(di[b]))
            assert_same(feats, ref, f"{kind}/{truncation}/{max_length} batch {b[:3]}")
            assert_same(revived(queries.take(qi[b]), docs.take(di[b])), ref)
        # featurize (encode then collate, texts in) on a few batches
        for b in batches(len(qs), size, rng)[:3]:
            bq, bd = [qs[i] for i in b], [ds[i] for i in b]
            assert_same(model.featurize(bq, bd), before(model, bq, bd))


@pytest.mark.parametrize("max_length", [4, 5, 8, 9, 16])
def test_monobert_longest_first_rule_on_every_pair_of_lengths(max_length, tiny_bert):
    """Pairs of every length 0..13 (one WordPiece per word): the rule in :func:`longest_first` is the tokenizer's."""
    model = bert(tiny_bert, max_length)
    n = range(14)
    qs = [" ".join(["lyme"] * a) for a in n for b in n]
    ds = [" ".join(["tick"] * b) for a in n for b in n]
    assert_same(model.featurize(qs, ds), bert_before(model, qs, ds))
    k1, k2 = longest_first(np.array([6, 7, 7, 2, 20]), np.array([7, 6, 7, 9, 1]), 10)
    assert k1.tolist() == [5, 5, 5, 2, 9] and k2.tolist() == [5, 5, 5, 8, 1]


def test_monot5_prompt_ids_are_the_query_part_then_the_document_part(toy, t5_dir):
    """tokens("Query: q Document: d Relevant:") == tokens("Query: q Document:") + tokens(" d Relevant:"), and the
    prompt's end as PyGaggle and pyterrier-t5 cut it, on the toy world's texts and the hazards."""
    model = t5(t5_dir, 512, "pygaggle")
    tok = model.tokenizer

    def ids(texts):
        return tok(texts, add_special_tokens=False)["input_ids"]

    qs, ds = pairs(toy)
    whole = ids([PROMPT.format(q=q, d=d) for q, d in zip(qs, ds)])
    parts = [a + b for a, b in zip(ids([f"Query: {q} Document:" for q in qs]), ids([f" {d} Relevant:" for d in ds]))]
    assert whole == parts
    # the plain split (document alone, "Relevant:" alone) holds for these texts too
    plain = [a + b + c for a, b, c in
             zip(ids([f"Query: {q} Document:" for q in qs]), ids(ds), ids(["Relevant:"] * len(ds)))]
    assert plain == whole
    # pygaggle: a cut prompt keeps max_length - 1 ids, then </s>
    long = PROMPT.format(q="lyme", d=toy["docs"][0] + " " + max(toy["docs"], key=len))
    cut = tok([long], max_length=32, truncation=True)["input_ids"][0]
    assert len(ids([long])[0]) > 32 and cut == ids([long])[0][:31] + [tok.eos_token_id]


def test_encoding_id_names_the_tokenizer_content(tiny_bert, t5_dir, tmp_path):
    import shutil

    bert_id = MonoBERT.encoding_id({"checkpoint": tiny_bert, "max_length": 512})
    assert bert_id == MonoBERT.encoding_id({"checkpoint": "bundled"})  # the same tokenizer files
    t5_id = MonoT5.encoding_id({"checkpoint": t5_dir})
    assert bert_id.startswith("sha256:") and t5_id != bert_id
    other = tmp_path / "t5"
    shutil.copytree(t5_dir, other)
    assert MonoT5.encoding_id({"checkpoint": str(other)}) == t5_id
    train_embedded_tokenizer(["another vocabulary, lyme tick ferry"] * 50, tmp_path / "t5b", vocab_size=60)
    assert MonoT5.encoding_id({"checkpoint": str(tmp_path / "t5b")}) != t5_id


def test_document_tokens_are_cut_to_what_the_model_can_read(tiny_bert, t5_dir):
    long = " ".join(["the"] * 700)
    d = MonoBERT.document_tokens({"checkpoint": tiny_bert, "max_length": 16}, [long, "", "the"], progress=True)
    assert d.lengths.tolist() == [13, 0, 1] and d.full.tolist() == [700, 0, 1]
    d = MonoT5.document_tokens({"checkpoint": t5_dir, "max_length": 16, "truncation": "pygaggle"}, [long, ""])
    assert d.lengths.tolist()[0] == 14 and d.full[0] > 700 and d.lengths[1] == d.full[1] == 1  # " Relevant:"
    d = MonoT5.document_tokens({"checkpoint": t5_dir, "max_length": 16, "truncation": "keep_prompt"}, [long, ""])
    assert d.lengths.tolist() == [13, 0]
    # a row stored shorter than the model reads is refused, not silently cut
    model = bert(tiny_bert, 32)
    docs = MonoBERT.document_tokens({"checkpoint": tiny_bert, "max_length": 16}, [long])
    with pytest.raises(ValueError, match="another max_length"):
        model.collator()(model.encode_queries(["lyme"], docs), docs)


@pytest.mark.parametrize("kind,truncation", MODELS)
def test_scores_from_stored_tokens_equal_scores_from_the_tokenizers_tensors(kind, truncation, toy, tiny_bert, t5_dir):
    """``model.score`` (encode, then batches of documents of similar length) equals the model on the tokenizer's
    tensors of the same batches, exactly; and the re-ranking transformer on stored tokens gives the same scores."""
    import pandas as pd

    model = build(kind, truncation, 64, tiny_bert, t5_dir)
    qs, ds = pairs(toy)
    rng = random.Random(2)
    pick = rng.sample(range(len(qs)), 96)
    qs, ds = [qs[i] for i in pick], [ds[i] for i in pick]
    scores = np.array(model.score(qs, ds, batch_size=16))
    order = np.argsort(model.encode_docs(ds).full, kind="stable")
    ref = np.zeros(len(qs))
    with torch.inference_mode():
        for s in range(0, len(order), 16):
            b = order[s : s + 16]
            ref[b] = model(**before(model, [qs[i] for i in b], [ds[i] for i in b])).double().numpy()
    assert np.array_equal(scores, ref)

    run = pd.DataFrame({"qid": [f"q{i % 7}" for i in range(len(qs))], "query": qs, "docno": [f"d{i}" for i in
                                                                                           range(len(qs))]})
    docs = type(model).document_tokens(model.hparams, ds)
    docs.keys = run["docno"].tolist()
    out = model.transformer(batch_size=16, docs=docs)(run).set_index("docno")["score"]
    assert np.allclose(out.loc[run["docno"]].to_numpy(), ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("kind", ["monobert", "monot5"])
def test_the_4d_padding_mask_scores_as_transformers_own_mask(kind, attn, toy, tiny_bert, t5_dir):
    """On CUDA the HF models hand transformers a ready (B, 1, 1, L) padding mask (no host sync on the mask's
    contents); built from the same 0/1 mask it scores a padded batch as transformers' own mask does."""
    import torch

    from leakexp.models.base import as_4d_mask

    set_seed(0)
    model = (MonoBERT(checkpoint=tiny_bert, max_length=64, attn_implementation=attn) if kind == "monobert" else
             MonoT5(checkpoint=t5_dir, max_length=64, truncation="pygaggle", attn_implementation=attn)).eval()
    feats = model.featurize(["short query", "another query"], ["a short document", " ".join(toy["docs"][:40])])
    assert (feats["attention_mask"] == 0).any()  # the batch is padded
    hf = model.bert if kind == "monobert" else model.t5
    with torch.inference_mode():
        own = model(**feats)
        ready = model(**dict(feats, attention_mask=as_4d_mask(feats["attention_mask"], hf.config)))
    assert torch.allclose(own, ready, atol=1e-6), (own, ready)
