"""How monoT5 and monoBERT compute on a GPU (leakexp.models.compute), proven on the CPU with small random models:
SDPA against eager attention, the padding mask decided on the host, the decoder without its cache, padded widths,
bf16 scoring weights against autocast, one graph per compiled core, one device-to-host read per scored batch, and
compiled training that resumes to the same bytes. The compiled tests are slow (Inductor builds C++ kernels)."""

from __future__ import annotations

import contextlib
import signal

import numpy as np
import pandas as pd
import pytest
import torch
from floats import assert_close_float32
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import leakexp.lib.trainer as training
from leakexp.lib.trainer import ResumeState, Training, host_mask, set_seed, train
from leakexp.models import REGISTRY
from leakexp.models.compute import Compute, bucket_width, graph_bound

WORDS = ["lyme", "tick", "hubble", "galaxy", "ferry", "ship", "bear", "forest"]
FILLER = "the and report weather sports market economy city news".split()
HF = ["monot5", "monobert"]


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory):
    from leakexp.models.monot5 import train_embedded_tokenizer

    texts = [f"the {a} and the {b} report {c} weather sports market economy city news" for a in WORDS for b in WORDS
             for c in WORDS] * 3
    return str(train_embedded_tokenizer(texts, tmp_path_factory.mktemp("tiny-t5"), vocab_size=300))


@pytest.fixture(scope="module")
def build(tiny_t5, tiny_bert):
    def make(name: str, seed: int = 0, **kw):
        torch.manual_seed(seed)
        path = tiny_t5 if name == "monot5" else tiny_bert
        return REGISTRY[name](**{"checkpoint": path, "max_length": 64, **kw}).eval()

    return make


def texts(n: int, seed: int = 0, longest: int = 40) -> tuple[list[str], list[str]]:
    """n queries and documents of 3 to ``longest`` words: batches with padding."""
    rng = np.random.default_rng(seed)
    queries = [" ".join(rng.choice(WORDS, 2)) for _ in range(n)]
    docs = [" ".join(rng.choice(WORDS + FILLER, rng.integers(3, longest))) for _ in range(n)]
    return queries, docs


class SDPASpy:
    """The attention masks that reach ``F.scaled_dot_product_attention`` (None, or shape and the tensor)."""

    def __init__(self, monkeypatch):
        self.masks: list = []
        real = F.scaled_dot_product_attention

        def spy(q, k, v, attn_mask=None, **kw):
            self.masks.append(attn_mask)
            return real(q, k, v, attn_mask=attn_mask, **kw)

        monkeypatch.setattr(F, "scaled_dot_product_attention", spy)

    def shapes(self) -> list:
        return [None if m is None else tuple(m.shape) for m in self.masks]


# -- attention and masks --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", HF)
def test_sdpa_scores_equal_eager_attention_within_1e5(name, build, monkeypatch):
    queries, docs = texts(24)
    spy = SDPASpy(monkeypatch)
    eager = build(name, attn_implementation="eager").score(queries, docs, batch_size=8)
    assert spy.masks == []  # the setting reaches every attention layer (T5's stacks too)
    sdpa = build(name, attn_implementation="sdpa").score(queries, docs, batch_size=8)
    assert spy.masks and max(abs(a - b) for a, b in zip(sdpa, eager)) <= 1e-5


@pytest.mark.parametrize("name", HF)
def test_a_batch_without_padding_reaches_sdpa_without_a_batch_mask_and_scores_exactly_alike(name, build, monkeypatch):
    """No padding: no mask goes in, so T5's position bias stays (1, H, L, L) and BERT's mask is None (its fused
    kernels); the scores equal those with the all-ones mask the CUDA path passed before, bit for bit. A padded batch
    keeps its mask: (B, H, L, L) for T5's encoder, a boolean mask for BERT."""
    from leakexp.models.base import as_4d_mask

    model = build(name)
    config = (model.t5 if name == "monot5" else model.bert).config
    same = model.featurize(["lyme tick"] * 4, ["the lyme and the tick report weather"] * 4)
    spy = SDPASpy(monkeypatch)
    with torch.inference_mode():
        decided = host_mask(same)
        assert "attention_mask" not in decided
        unmasked = model(**decided)
        encoder = spy.shapes()
        spy.masks.clear()
        masked = model(**dict(same, attention_mask=as_4d_mask(same["attention_mask"], config)))
    assert torch.equal(unmasked, masked)
    width, heads = same["input_ids"].shape[1], config.num_heads if name == "monot5" else config.num_attention_heads
    layers = config.num_layers if name == "monot5" else config.num_hidden_layers
    assert encoder[:layers] == ([(1, heads, width, width)] * layers if name == "monot5" else [None] * layers)

    padded = model.featurize(["lyme tick", "ship"], ["the lyme and the tick report weather", "ship"])
    spy.masks.clear()
    with torch.inference_mode():
        model(**host_mask(padded))
    width = padded["input_ids"].shape[1]
    if name == "monot5":
        assert spy.shapes()[:layers] == [(2, heads, width, width)] * layers
    else:
        assert all(m is not None and m.dtype == torch.bool for m in spy.masks)


def test_the_position_bias_and_mask_are_merged_once_per_forward_with_equal_scores(build, monkeypatch):
    """``bias_once``: every encoder layer reads one (B, H, L, L) tensor; transformers' path builds one per layer."""
    model = build("monot5")
    queries, docs = texts(6)
    feats = host_mask(model.featurize(queries, docs))
    layers = model.t5.config.num_layers
    spy = SDPASpy(monkeypatch)
    with torch.inference_mode():
        per_layer = model(**feats)
        apart = {m.data_ptr() for m in spy.masks[:layers]}
        spy.masks.clear()
        once = model.use(Compute(bias_once=True))(**feats)
        shared = {m.data_ptr() for m in spy.masks[:layers]}
    assert len(apart) == layers and len(shared) == 1
    assert_close_float32(once.numpy(), per_layer.numpy(), terms=feats["input_ids"].shape[1])


def test_single_query_cross_attention_scores_alike_with_fewer_flops(build):
    from torch.utils.flop_counter import FlopCounterMode

    model = build("monot5")
    queries, docs = texts(8)
    feats = host_mask(model.featurize(queries, docs))

    def run():
        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            out = model(**feats)
        return out, counter.get_total_flops()

    full, full_flops = run()
    model.use(Compute(single_query=True))
    single, single_flops = run()
    assert max(abs(single - full)).item() <= 1e-5 and single_flops < full_flops
    model.use(Compute())  # and back: transformers' cross-attention again
    assert torch.equal(run()[0], full)


def test_the_decoder_step_runs_without_its_cache_and_concatenates_nothing(build):
    """``use_cache=False``: no cache copies every layer's cross-attention keys and values (``aten.cat``); the
    scores are the same bits as with the cache (the path before, ``legacy``)."""

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.add(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    model = build("monot5")
    feats = model.featurize(*texts(4))
    ops, legacy_ops = Ops(), Ops()
    with torch.inference_mode():
        with ops:
            plain = model(**feats)
        with legacy_ops:
            cached = model.use(Compute(legacy=True))(**feats)
    assert "aten.cat" in legacy_ops.seen and "aten.cat" not in ops.seen
    assert torch.equal(plain, cached)


@pytest.mark.parametrize("name", HF)
def test_widths_padded_to_a_multiple_of_64_score_alike(name, build):
    model = build(name, max_length=160)
    queries, docs = texts(12, longest=20 if name == "monot5" else 70)  # 65 to 127 tokens wide
    plain = model.featurize(queries, docs)
    model.use(Compute(compile=True))  # its collator pads widths (nothing is compiled here)
    wide = model.featurize(queries, docs)
    assert 64 < plain["input_ids"].shape[1] < wide["input_ids"].shape[1] == 128
    with torch.inference_mode():
        assert_close_float32(model(**wide).numpy(), model(**plain).numpy(), terms=128)
    assert bucket_width(130, 160, 64) == 160 and bucket_width(64, 512, 64) == 64 and bucket_width(5, 512, 0) == 5


# -- bf16 scoring weights -----------------------------------------------------------------------------------------
@contextlib.contextmanager
def bf16_cpu_kernels():
    """Skip where this CPU's PyTorch kernels compute no bf16 attention (without AVX-512, e.g. under
    ATEN_CPU_CAPABILITY=default, bf16 SDPA stops with "pack_vnni2 is only supported when avx512 is supported")."""
    try:
        yield
    except RuntimeError as exc:
        if "only supported when avx512" in str(exc):
            pytest.skip(f"this CPU computes no bf16 attention: {exc}")
        raise


def drift(model, queries, docs) -> tuple[float, float]:
    """Max |score - fp32 score| under bf16 autocast (CPU autocast: as CUDA's, fp32 islands kept) and with bf16
    weights, on the same inputs."""
    fp32 = np.array(model.score(queries, docs, batch_size=16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = np.array(model.score(queries, docs, batch_size=16))
    bf16 = np.array(model.use(Compute(bf16_weights=True)).score(queries, docs, batch_size=16))
    return float(np.abs(autocast - fp32).max()), float(np.abs(bf16 - fp32).max())


@pytest.mark.parametrize("name", HF)
def test_experiment_paper_scores_with_bf16_weights_where_they_drift_no_further_than_autocast(name, build, tmp_path,
                                                                                               monkeypatch):
    """monoT5's bf16 weights (its one decoder step, the score head, in fp32) stay closer to fp32 than autocast does,
    so experiment=paper scores with them; monoBERT's (bf16 residual stream, fp32 classifier) drift further, so it
    keeps fp32 weights under autocast."""
    from conftest import paper_env

    from leakexp.runner.registry import compose

    with bf16_cpu_kernels():
        autocast, bf16 = drift(build(name), *texts(64, seed=1))
    paper = compose([*paper_env(tmp_path, monkeypatch), f"store={tmp_path}"]).model_of(name)
    assert (paper.cuda.rerank_weights == "bf16") == (bf16 <= autocast), (autocast, bf16)
    if name == "monot5":
        assert bf16 <= autocast


@pytest.mark.parametrize("name", HF)
def test_bf16_weights_keep_the_score_head_in_fp32_and_scores_in_float64(name, build, tmp_path):
    model = build(name).use(Compute(bf16_weights=True))
    if name == "monot5":
        assert all(p.dtype == torch.bfloat16 for p in model.t5.encoder.parameters())
        assert model.t5.lm_head.weight.dtype == torch.float32  # the two rows the score reads
        assert all(p.dtype == torch.float32 for n, p in model.t5.decoder.named_parameters() if ".k." not in n
                   and ".v." not in n or "EncDecAttention" not in n)
    else:
        assert all(p.dtype == torch.bfloat16 for p in model.bert.bert.parameters())
        assert all(p.dtype == torch.float32 for p in model.bert.classifier.parameters())
    queries, docs = texts(8)
    with bf16_cpu_kernels():
        scores = model.score_tokens(model.encode_queries(queries, d := model.encode_docs(docs)), d, batch_size=4)
    assert scores.dtype == np.float64 and np.isfinite(scores).all()
    with pytest.raises(RuntimeError, match="not saved"):
        model.save(tmp_path / "cast")


# -- host reads -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", HF)
def test_exactly_one_device_to_host_read_per_scored_batch(name, build, monkeypatch):
    model = build(name)
    queries, docs = texts(21)
    q = model.encode_queries(queries, d := model.encode_docs(docs))
    reads = {"cpu": 0, "item": 0, "tolist": 0}
    for method in reads:
        real = getattr(torch.Tensor, method)

        def counted(self, *args, _real=real, _method=method, **kwargs):
            reads[_method] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, method, counted)
    scores = model.score_tokens(q, d, batch_size=5)
    monkeypatch.undo()
    assert reads == {"cpu": 5, "item": 0, "tolist": 0}  # 21 documents in batches of 5
    assert_close_float32(scores, model.score_tokens(q, d, batch_size=21), terms=64)  # each score to its document


# -- settings -------------------------------------------------------------------------------------------------
def test_experiment_paper_takes_the_fast_path_on_cuda_only(tmp_path, monkeypatch):
    from conftest import paper_env

    from leakexp.runner.registry import runner
    from leakexp.runner.config import resolved_values, score_batch_size
    from leakexp.runner.registry import compose

    paper = compose([*paper_env(tmp_path, monkeypatch), f"store={tmp_path / 'store'}"])
    demo = compose(["experiment=demo", f"store={tmp_path / 'store'}"])
    s = runner(paper, readonly=True).settings
    assert s.precision.train_compile and s.precision.rerank_compile
    assert (s.model_of("monot5").cuda.rerank_weights, s.model_of("monobert").cuda.rerank_weights) == ("bf16", "autocast")
    # monoBERT scores eagerly: compiled, it scored 0.57x as fast on an H200 (docs/models.md)
    assert (s.model_of("monot5").cuda.rerank_compile, s.model_of("monobert").cuda.rerank_compile) == (True, False)
    models = paper.values["models"]
    assert [score_batch_size(models[m], d) for m in ("monot5", "monobert") for d in ("cuda", "cpu")] == [128, 32] * 2
    d = runner(demo, readonly=True).settings
    assert not d.precision.train_compile and d.model_of("monot5").cuda.rerank_weights == "autocast"
    assert score_batch_size(demo.values["models"]["monot5"], "cuda") == 32


@pytest.mark.parametrize("override,message", [
    ("model_overrides.monot5.cuda.micro_batch=3", r"models.monot5.cuda.micro_batch=3 does not divide the 8 pairs of "
                                                  r"an update \(train.batch_size 8 x train.grad_accum 1\)"),
    ("model_overrides.monobert.cuda.rerank_weights=fp16", "rerank_weights"),
    ("precision.train_compile=maybe", "precision.train_compile"),
])
def test_a_bad_compute_setting_is_one_line_naming_it(override, message, tmp_path):
    from leakexp.runner.registry import compose
    from leakexp.runner.stage import ConfigError

    with pytest.raises(ConfigError, match=message) as err:
        compose(["experiment=demo", f"store={tmp_path}", override])
    assert "\n" not in str(err.value)


def test_on_cuda_the_compute_settings_key_the_stages_they_change(tmp_path):
    """A compiled training run is keyed apart from an eager one (Inductor draws its dropout its own way), bf16
    weights and compiled scoring key the re-ranking, not the checkpoint; a batch size keys nothing; a KNRM artifact
    reads none of it. On a CPU none of it is read (the demo's keys: tests/test_key_records.py)."""
    from leakexp.runner.stage import stages
    from leakexp.runner.registry import compose
    from leakexp.runner.pipeline import Runner
    from leakexp.runner.store import Store
    from leakexp.stages.cell import Cell

    def keys(*overrides, cuda=True):
        cfg = compose(["experiment=demo", f"store={tmp_path}", *overrides])
        r = Runner(cfg, stages(), Store(tmp_path), cuda=cuda)
        return {(m, stage): r.key(Cell("toy_robust", "msm", 128, m, 1).ask(stage))
                for m in ("monot5", "monobert", "knrm") for stage in ("train", "rerank")}

    base = keys()
    changed = lambda *o, cuda=True: {k for k, v in keys(*o, cuda=cuda).items() if v != base[k]}  # noqa: E731
    assert changed("precision.train_compile=true") == {(m, s) for m in HF for s in ("train", "rerank")}
    assert changed("precision.rerank_compile=true") == {(m, "rerank") for m in HF}
    assert changed("model_overrides.monot5.cuda.rerank_weights=bf16") == {("monot5", "rerank")}
    assert changed("model_overrides.monot5.cuda.micro_batch=8") == {("monot5", "train"), ("monot5", "rerank")}
    assert changed("model_overrides.monot5.cuda.score_batch_size=128") == set()
    assert changed("model_overrides.monobert.cuda.rerank_compile=false") == {("monobert", "rerank")}
    assert changed("model_overrides.monot5.cuda.single_query_cross_attention=true") == {("monot5", "rerank")}
    assert changed("model_overrides.monot5.cuda.position_bias_once=true") == {("monot5", "train"), ("monot5", "rerank")}
    cpu = keys(cuda=False)
    assert {k for k, v in keys("precision.compile=true", "model_overrides.monot5.cuda.micro_batch=8",
                               "model_overrides.monot5.cuda.rerank_weights=bf16", cuda=False).items()
            if v != cpu[k]} == set()


def test_on_cuda_a_micro_batch_keeps_the_updates_pairs():
    from leakexp.stages.train import on_cuda

    train = {"batch_size": 16, "grad_accum": 4, "lr": 1e-3}
    assert on_cuda(train, {"micro_batch": 32}) == {"batch_size": 32, "grad_accum": 2, "lr": 1e-3}
    assert on_cuda(train, {"micro_batch": None}) == train and on_cuda(train, None) == train


# -- compiled cores (slow: Inductor compiles C++ kernels, about a minute each on two cores) ----------------------
@pytest.mark.parametrize("name", HF)
def test_one_graph_without_breaks_for_scoring_and_for_the_training_loss(name, build):
    model = build(name)
    feats = host_mask(model.featurize(*texts(6)))
    with torch.inference_mode():
        scoring = torch._dynamo.explain(model.forward)(**feats)
    labels = torch.tensor([1, 0] * 3)
    loss = torch._dynamo.explain(model._loss)(feats, labels, *([1e-4] if name == "monot5" else []))
    assert (scoring.graph_count, scoring.graph_break_count) == (1, 0), scoring.break_reasons
    assert (loss.graph_count, loss.graph_break_count) == (1, 0), loss.break_reasons


@pytest.mark.slow
@pytest.mark.parametrize("name", HF)
def test_compiled_scoring_equals_eager_and_a_bucket_compiles_once(name, build):
    from torch._dynamo.utils import counters

    model = build(name, max_length=128)
    narrow, wide = (8, 30) if name == "monot5" else (30, 90)  # words: at most 64 tokens, more than 64
    queries, docs = texts(20, longest=narrow)
    eager = model.score(queries, docs, batch_size=8)
    model.use(Compute(compile=True))
    before = counters["stats"]["unique_graphs"]
    compiled = model.score(queries, docs, batch_size=8)  # every batch is 64 wide, the last padded with rows
    first = counters["stats"]["unique_graphs"] - before
    model.score(*texts(13, seed=5, longest=narrow), batch_size=8)  # other documents, the same bucket
    assert counters["stats"]["unique_graphs"] - before == first == 1  # the same bucket never recompiles
    assert max(abs(a - b) for a, b in zip(compiled, eager)) <= 1e-5
    model.score(*texts(8, seed=6, longest=wide), batch_size=8)  # a wider bucket: one graph more
    assert counters["stats"]["unique_graphs"] - before == 2 <= graph_bound(128)


def _pairs(n: int = 12) -> pd.DataFrame:
    rows = []
    for i in range(n):
        a, b = WORDS[i % 8], WORDS[(i + 3) % 8]
        rows += [(i, f"q{i}", f"{a} {b}", f"d{i}+", f"the {a} and the {b} report {a} {b}", 1),
                 (i, f"q{i}", f"{a} {b}", f"d{i}-", "weather sports market economy", 0)]
    return pd.DataFrame(rows, columns=["pair", "qid", "query", "docno", "text", "label"])


@pytest.fixture
def one_thread():
    """Inductor's CPU kernels accumulate the embedding's gradient with atomic adds: on one thread the order is fixed
    (artifacts computed on a CPU use one thread: cpu_threads)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Preempted(BaseException):
    pass


@pytest.mark.slow
def test_three_compiled_training_updates_resume_to_the_same_bytes(tiny_t5, tmp_path, monkeypatch, one_thread):
    """monoT5 with dropout, its loss compiled: stopped by SIGUSR2 after its second update and resumed, it ends with
    the weights and history of three uninterrupted updates."""
    cfg = Training(batch_size=2, grad_accum=2, updates=3, lr=3e-3, optimizer="adafactor")

    def model():
        set_seed(3)
        return REGISTRY["monot5"](checkpoint=tiny_t5, max_length=64).use(Compute(compile=True))

    ref_model = model()
    ref = train(ref_model, _pairs(), seed=3, cfg=cfg, progress=False)
    real, calls = training.batch_loss, {"n": 0}

    def batch_loss(*args, **kwargs):  # SIGUSR2 while update 2's second micro-batch is computed
        calls["n"] += 1
        if calls["n"] == 4:
            signal.raise_signal(signal.SIGUSR2)
        return real(*args, **kwargs)

    def requeue(signum, frame):
        raise Preempted

    previous = signal.signal(signal.SIGUSR2, requeue)
    try:
        monkeypatch.setattr(training, "batch_loss", batch_loss)
        with pytest.raises(Preempted):
            train(model(), _pairs(), seed=3, cfg=cfg, progress=False, resume=ResumeState(tmp_path, "run", every_s=0))
        monkeypatch.undo()
        resumed_model = model()
        resumed = train(resumed_model, _pairs(), seed=3, cfg=cfg, progress=False,
                        resume=ResumeState(tmp_path, "run", every_s=0))
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert torch.load(tmp_path / ResumeState.FILE, weights_only=True)["step"] == 2
    assert all(torch.equal(a, b) for a, b in zip(resumed_model.state_dict().values(), ref_model.state_dict().values()))
    pd.testing.assert_frame_equal(resumed.history, ref.history, check_exact=True)


def test_the_score_head_turns_autocast_off_without_asking_torch_whether_cuda_or_the_cpu_has_it(monkeypatch):
    """torch.compile of torch 2.11 cannot trace ``torch.amp.is_autocast_available`` (a compiled monoT5 failed on an
    H200 at its score head's fp32 block), so the devices that have autocast are answered without asking."""
    import torch

    from leakexp.models.base import fp32

    def asked(device_type):
        raise AssertionError(f"is_autocast_available({device_type!r}) was called")

    monkeypatch.setattr(torch.amp, "is_autocast_available", asked)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fp32(torch.matmul, torch.ones(2, 3), torch.ones(3, 2))
    assert out.dtype == torch.float32 and out.tolist() == [[3.0, 3.0], [3.0, 3.0]]
