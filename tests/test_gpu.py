"""The CUDA path (``make test-gpu``): every model trains a few updates and re-ranks under bf16 at the paper's shapes
(512 tokens for monoBERT / monoT5 with the bert-base-uncased / t5-base architectures, 800 document tokens and 300-d
vectors for KNRM / PACRR / DUET), randomly initialised, on synthetic inputs.

Skipped without CUDA. LEAKEXP_GPU_TEST_DEVICE=cpu runs the same checks on a CPU (slow; for the test code itself).
"""

import math
import os

import pytest
import torch
from torch import nn

from leakexp.models import load_checkpoint
from leakexp.models.base import ties_per_query
from leakexp.models.paper import PaperModels, synthetic_pairs
from leakexp.lib.trainer import Training, set_seed, train

DEVICE = os.environ.get("LEAKEXP_GPU_TEST_DEVICE", "cuda")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE.startswith("cuda") and not torch.cuda.is_available(), reason="needs CUDA")]
MODELS = ["monot5", "monobert", "knrm", "duet", "pacrr"]


@pytest.fixture(scope="module")
def paper(tmp_path_factory):
    return PaperModels(tmp_path_factory.mktemp("paper-models"))


def _first_module_output_dtype(model: nn.Module, fn) -> torch.dtype:
    """The dtype of the first Linear / Conv output while ``fn`` runs (bf16 under autocast)."""
    seen = []
    hooks = [m.register_forward_hook(lambda mod, i, o: seen.append(o.dtype))
             for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    try:
        fn()
    finally:
        for h in hooks:
            h.remove()
    return seen[0]


@pytest.mark.parametrize("name", MODELS)
def test_trains_and_reranks_on_cuda_in_bf16_at_paper_shapes(name, paper, tmp_path):
    switches = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
                torch.backends.cudnn.allow_tf32)
    set_seed(0)
    model = paper.build(name)
    cfg = Training.of_model(name, updates=3, grad_accum=2)
    data = synthetic_pairs(4 * cfg.batch_size, doc_words=900)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    result = train(model, data, seed=0, cfg=cfg, device=DEVICE, progress=False)
    assert result["updates"] == 3 and result.history.loss.map(math.isfinite).all()
    assert all(p.device.type == torch.device(DEVICE).type for p in model.parameters())
    assert any(not torch.equal(v.cpu(), before[k]) for k, v in model.state_dict().items() if v.is_floating_point())
    assert (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32) == switches  # training sets no process-wide switch

    queries, docs = data["query"].tolist()[:24], data["text"].tolist()[:24]
    if name in ("monot5", "monobert"):  # 900 words: the full 512 tokens
        assert model.featurize(queries[:2], docs[:2])["input_ids"].shape[1] == 512
    else:
        assert model.featurize(queries[:2], docs[:2])["d"].shape[1] == 800
    half = model.score(queries, docs, batch_size=8, device=DEVICE, bf16=True)
    full = model.score(queries, docs, batch_size=8, device=DEVICE, bf16=False)
    assert all(math.isfinite(s) for s in half)
    scale = max(1.0, max(abs(s) for s in full))
    assert max(abs(a - b) for a, b in zip(half, full)) < 0.05 * scale  # bf16 re-ranking tracks fp32

    if DEVICE.startswith("cuda"):
        feats = {k: v.to(DEVICE) for k, v in model.featurize(queries[:8], docs[:8]).items()}

        def run():
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
                model.eval()(**feats)

        # the heavy layers run in bf16 (KNRM has none: its cosine kernels and 11 -> 1 layer stay fp32)
        assert _first_module_output_dtype(model, run) == (torch.float32 if name == "knrm" else torch.bfloat16)
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
            assert model.eval()(**feats).dtype == torch.float32  # the score head stays fp32

    # the stored model re-ranks exactly as the model in the training process did
    model.save(tmp_path / name)
    back = load_checkpoint(tmp_path / name, idf=getattr(model, "idf_table", None)).to(DEVICE)
    assert back.score(queries, docs, batch_size=8, device=DEVICE, bf16=True) == half


def test_duet_embeds_on_the_device(paper):
    """The bug this suite was written for: DUET looked vectors up on the CPU after train() moved it to CUDA."""
    set_seed(0)
    model = paper.build("duet").to(DEVICE)
    feats = model.featurize(["w1 w2"], ["w1 w3 w2 unknownword"])
    assert all(v.device.type == "cpu" for v in feats.values())
    emb = model.embed(feats["d"].to(DEVICE), feats["oov"].to(DEVICE))
    assert emb.device.type == torch.device(DEVICE).type and emb.shape == (1, 800, 300)


@pytest.mark.parametrize("name", MODELS)
def test_bf16_reranking_ties_no_more_documents_than_fp32(name, paper):
    """64 distinct documents for each of 4 queries at the paper's shapes: under bf16 autocast as many tied documents
    per query as in fp32, give or take one (score heads, log-softmax and cosine kernels stay fp32)."""
    import pandas as pd

    set_seed(0)
    model = paper.build(name).to(DEVICE)
    data = synthetic_pairs(128, doc_words=300, seed=3)
    run = pd.DataFrame({"qid": [str(i // 64) for i in range(256)], "query": data["query"].iloc[:256:64].repeat(64).values,
                        "docno": data.docno.values, "text": data.text.values})
    q, d = run["query"].tolist(), run.text.tolist()
    fp32 = run.assign(score=model.score(q, d, batch_size=32, device=DEVICE, bf16=False))
    if DEVICE.startswith("cuda"):
        half = model.score(q, d, batch_size=32, device=DEVICE, bf16=True)  # the re-ranking stage's path
    else:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = model.score(q, d, batch_size=32, device=DEVICE)
    bf16 = run.assign(score=half)
    assert ties_per_query(bf16) <= ties_per_query(fp32) + 1.0


@pytest.mark.parametrize("name", MODELS)
def test_a_training_step_never_waits_for_the_host(name, paper):
    """Between two reads of the losses an update runs without a device-to-host sync: the batch comes from pinned
    memory (non-blocking copies), the loss stays on the device. Checked with CUDA's sync debug mode set to error."""
    from leakexp.lib.trainer import PairBatches, batch_loss, make_optimizer, pairs_of

    if not DEVICE.startswith("cuda"):
        pytest.skip("the sync debug mode exists on CUDA only")
    set_seed(0)
    model = paper.build(name).to(DEVICE).train()
    cfg = Training.of_model(name)
    pos, neg = pairs_of(synthetic_pairs(2 * cfg.batch_size, doc_words=900))
    batches = PairBatches.of(model, pos, neg, [torch.arange(cfg.batch_size).numpy()] * 2)
    loader = iter(batches.loader(workers=1, pin_memory=True))
    opt = make_optimizer(model, cfg)
    batch_loss(model, next(loader), DEVICE, True).backward()  # warm-up: lazy initialisations may sync once
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    batch = next(loader)
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss = batch_loss(model, batch, DEVICE, True)
        loss.backward()
        if cfg.max_grad_norm:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert math.isfinite(loss.item())


def test_one_whole_cell_on_cuda(tmp_path):
    """Train, re-rank and evaluate one demo cell on CUDA through the runner: the stored run is complete and its
    measures are numbers (the path `make grid` takes on a GPU workstation)."""
    from leakexp.stages.cell import Cell
    from leakexp.runner.registry import compose
    from leakexp.grid.work import run_cell
    from leakexp.runner.registry import runner

    cfg = compose([f"store={tmp_path / 'store'}", f"device={DEVICE}", "data.queries_per_source=600",
                   "grid.sizes=[128]", "grid.seeds=[1]", "grid.models=[monot5]", "loader_workers=2"])
    r = runner(cfg)
    means = run_cell(r, Cell("toy_robust", "msm", 128, "monot5", 1))
    assert set(means) >= {"nDCG@10", "P@1"} and all(math.isfinite(v) for v in means.values())


@pytest.mark.parametrize("name", MODELS)
def test_a_document_scores_the_same_in_a_padded_batch_as_alone(name, paper):
    """Padding on the device: a short document batched with long ones (attention masks, KNRM/PACRR's analytic
    padding, DUET's fixed width) scores as it does alone, in fp32 on CUDA."""
    set_seed(0)
    model = paper.build(name).to(DEVICE).eval()
    lengths = [10, 40, 900, 12, 250, 9, 600, 80]  # words (the positive repeats the query 3 times)
    rows = [synthetic_pairs(1, doc_words=n, seed=i).iloc[0] for i, n in enumerate(lengths)]
    queries, docs = [r["query"] for r in rows], [r["text"] for r in rows]
    if model.needs_idf:
        from leakexp.models.capreolus import IdfTable

        model.use_idf(IdfTable.from_docs(docs))
    together = model.score(queries, docs, batch_size=len(docs), device=DEVICE, bf16=False)
    alone = [model.score([q], [d], batch_size=1, device=DEVICE, bf16=False)[0] for q, d in zip(queries, docs)]
    assert together == pytest.approx(alone, rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("name", ["monot5", "monobert"])
def test_the_fast_path_scores_a_batch_without_a_sync_and_tracks_fp32(name, paper):
    """bf16 weights (monoT5's decoder step and the score heads in fp32) at the paper's shapes: a batch without padding
    goes in without a mask and is scored without a device-to-host sync (CUDA's sync debug mode set to error), the
    scores track fp32, and the compiled core scores alike."""
    from leakexp.lib.trainer import host_mask, pin_batch, to_device
    from leakexp.models.compute import Compute

    if not DEVICE.startswith("cuda"):
        pytest.skip("the sync debug mode exists on CUDA only")
    set_seed(0)
    model = paper.build(name).to(DEVICE)
    data = synthetic_pairs(32, doc_words=900)
    queries, docs = data["query"].tolist(), data["text"].tolist()
    fp32 = model.score(queries, docs, batch_size=32, device=DEVICE, bf16=False)
    autocast = model.score(queries, docs, batch_size=32, device=DEVICE, bf16=True)
    model.use(Compute(bf16_weights=True))
    feats = to_device(pin_batch(host_mask(model.featurize(queries[:32], docs[:32]))), DEVICE, non_blocking=True)
    assert "attention_mask" not in feats  # 900 words: every row is 512 tokens
    model.eval()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.inference_mode():
            scores = model.scores(feats)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert scores.dtype == torch.float32 and torch.isfinite(scores).all()
    fast = model.score(queries, docs, batch_size=32, device=DEVICE)
    floor, scale = max(abs(a - b) for a, b in zip(autocast, fp32)), max(1.0, max(abs(s) for s in fp32))
    drift = max(abs(a - b) for a, b in zip(fast, fp32))
    # monoT5 scores with bf16 weights in experiment=paper: about autocast's noise floor at most; monoBERT's bf16
    # weights (not the paper's) only track fp32, as bf16 autocast does (the bench's rows measure both)
    assert drift <= (2 * floor + 1e-3 if name == "monot5" else 0.05 * scale), (drift, floor)
    compiled = model.use(Compute(bf16_weights=True, compile=True)).score(queries, docs, batch_size=32, device=DEVICE)
    assert max(abs(a - b) for a, b in zip(compiled, fast)) <= 0.05 * max(1.0, max(abs(s) for s in fast))
