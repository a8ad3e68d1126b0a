"""BERT's AdamWeightDecayOptimizer (leakexp.lib.bert_adam) with BERT's schedule and clipping, dl4marco-bert's monoBERT
recipe, against a numpy port of ``optimization.py`` (nyu-dl/dl4marco-bert @ a75f26a: create_optimizer lines 25-81,
AdamWeightDecayOptimizer lines 84-167; google-research/bert @ eedf571 holds the same file) in float32, as TF computes
it."""

import re

import numpy as np
import pandas as pd
import pytest
import torch

from floats import EPS32, assert_close_float32
from leakexp.lib.bert_adam import BertAdamW
from leakexp.models import REGISTRY
from leakexp.runner.config import model_config
from leakexp.lib.trainer import ResumeState, Training, lr_factor, make_optimizer, set_seed, train


class Reference:
    """``create_optimizer``'s training op over named float32 variables: the learning rate at global step t (lines
    29-54), the gradients clipped to a global norm of 1.0 (line 74), then ``apply_gradients`` (lines 105-154) with
    the weight decay ``_do_use_weight_decay`` allows (lines 156-164: a regex search of each exclusion in the name)."""

    def __init__(self, named: dict[str, np.ndarray], init_lr: float, num_train_steps: int, num_warmup_steps: int,
                 weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 exclude_from_weight_decay=("LayerNorm", "layer_norm", "bias"), clip_norm=1.0):
        self.params = {n: np.array(v, dtype=np.float32) for n, v in named.items()}
        self.m = {n: np.zeros_like(v) for n, v in self.params.items()}
        self.v = {n: np.zeros_like(v) for n, v in self.params.items()}
        self.init_lr, self.total, self.warmup = np.float32(init_lr), num_train_steps, num_warmup_steps
        self.wd, self.b1, self.b2, self.eps = weight_decay_rate, beta_1, beta_2, np.float32(epsilon)
        self.exclude, self.clip_norm = exclude_from_weight_decay, np.float32(clip_norm)
        self.global_step = 0
        self.scales: list[float] = []

    def learning_rate(self) -> np.float32:
        t = self.global_step
        # tf.train.polynomial_decay(power=1.0, end_learning_rate=0.0, cycle=False): lr * (1 - min(t, T) / T)
        lr = self.init_lr * (np.float32(1.0) - np.float32(min(t, self.total)) / np.float32(self.total))
        if self.warmup:  # lines 42-54
            warmup_lr = self.init_lr * (np.float32(t) / np.float32(self.warmup))
            is_warmup = np.float32(t < self.warmup)
            lr = (np.float32(1.0) - is_warmup) * lr + is_warmup * warmup_lr
        return np.float32(lr)

    def decays(self, name: str) -> bool:
        return bool(self.wd) and not any(re.search(r, name) is not None for r in self.exclude)

    def step(self, grads: dict[str, np.ndarray]) -> None:
        lr = self.learning_rate()
        # tf.clip_by_global_norm: t * clip_norm * min(1 / global_norm, 1 / clip_norm)
        norm = np.sqrt(np.sum([np.sum(np.square(g), dtype=np.float32) for g in grads.values()], dtype=np.float32))
        scale = self.clip_norm * min(np.float32(1.0) / norm, np.float32(1.0) / self.clip_norm)
        self.scales.append(float(scale))
        for name, grad in grads.items():
            grad = np.asarray(grad, np.float32) * scale
            param = self.params[name]
            self.m[name] = np.float32(self.b1) * self.m[name] + np.float32(1.0 - self.b1) * grad  # lines 128-129
            self.v[name] = np.float32(self.b2) * self.v[name] + np.float32(1.0 - self.b2) * np.square(grad)
            update = self.m[name] / (np.sqrt(self.v[name]) + self.eps)  # line 134
            if self.decays(name):  # lines 143-144
                update = update + np.float32(self.wd) * param
            self.params[name] = param - lr * update  # lines 146-148
        self.global_step += 1  # lines 79-80, after the update


def test_bert_schedule_starts_at_zero_and_decays_over_the_whole_run():
    """is_warmup = t < warmup: t / warmup for t = 0, 1; then polynomial_decay's 1 - t / total (0.8 at t = 2, not the
    peak); LambdaLR's step is the global step before the update, as TF's."""
    got = [lr_factor(s, 10, 2, "bert") for s in range(10)]
    assert got == pytest.approx([0.0, 0.5, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1], abs=1e-15)
    ref = Reference({"w": np.zeros(1)}, 1.0, 10, 2)
    for s in range(10):
        assert float(ref.learning_rate()) == pytest.approx(got[s], abs=EPS32, rel=0)  # TF's float32
        ref.global_step += 1
    assert [lr_factor(s, 4, 0, "bert") for s in range(4)] == [1.0, 0.75, 0.5, 0.25]  # no warmup: from the peak


def test_dl4marco_trains_with_bert_adamw_and_torch_adamw_stays_a_named_alternative(tiny_bert):
    cfg = Training.of(model_config("monobert")["train"], {"epochs": 1})
    opt = make_optimizer(REGISTRY["monobert"](checkpoint=tiny_bert), cfg)
    assert type(opt) is BertAdamW and (cfg.decay, cfg.max_grad_norm, opt.defaults["eps"]) == ("bert", 1.0, 1e-6)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    torch_cfg = Training(**dict(vars(cfg), optimizer="adamw"))
    assert type(make_optimizer(REGISTRY["monobert"](checkpoint=tiny_bert), torch_cfg)) is torch.optim.AdamW


def _pairs(n: int) -> pd.DataFrame:
    rows = []
    for i in range(n):
        rows += [(i, f"q{i}", f"lyme tick {i % 3}", f"d{i}+", f"the lyme and the tick report {i}", 1),
                 (i, f"q{i}", f"lyme tick {i % 3}", f"d{i}-", f"weather sports market {i}", 0)]
    return pd.DataFrame(rows, columns=["pair", "qid", "query", "docno", "text", "label"])


# 8 updates of 2 micro-batches of 2 pairs, 2 of them warmup (the first at lr 0); a large lr so that every update moves
# the weights well above float32 rounding, a weight decay that shows, and a clipping norm that the small BERT's
# gradients (norms 0.1-0.3) cross
CFG = Training(batch_size=2, grad_accum=2, lr=2e-3, optimizer="bert_adamw", weight_decay=0.05, adam_eps=1e-6,
                  warmup=0.25, decay="bert", max_grad_norm=0.15, group_by_length=False)


def test_training_equals_a_port_of_bert_optimization_py(tiny_bert, monkeypatch):
    """A small BERT trained by the trainer (schedule, clipping, optimiser) ends at the weights that the numpy port of
    optimization.py computes from the same gradients, to float32 rounding: the exclusions from weight decay by
    BERT's names (LayerNorm, bias), the warmup from 0, the decay over the whole run, the clipping (which acts on
    some updates and not on others) and the moments without bias correction."""
    set_seed(5)
    model = REGISTRY["monobert"](checkpoint=tiny_bert, max_length=32)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any("LayerNorm" in n for n in names) and any(n.endswith("bias") for n in names)
    start = {n: p.detach().numpy().copy() for n, p in model.named_parameters() if p.requires_grad}
    ref = Reference(start, CFG.lr, num_train_steps=8, num_warmup_steps=2, weight_decay_rate=CFG.weight_decay,
                    clip_norm=CFG.max_grad_norm)
    real = torch.nn.utils.clip_grad_norm_

    def clip(params, max_norm):  # the gradients before clipping go to the port
        params = list(params)
        ref.step({n: p.grad.detach().numpy().copy() for n, p in zip(names, params)})
        return real(params, max_norm)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    result = train(model, _pairs(32), seed=1, cfg=CFG, progress=False)
    assert result["updates"] == 8 and ref.global_step == 8 and result.history.lr.iloc[0] == 0.0
    assert min(ref.scales) < 0.9 and max(ref.scales) == 1.0  # clipped on some updates, not on all
    assert set(ref.params) == set(names)
    for n, p in model.named_parameters():
        # each update changes a weight by at most about lr * (|m| / sqrt(v) + wd |w|) (|m| / sqrt(v) < 1.5 here),
        # computed in ~10 float32 operations, and rounds it once: 8 updates, 16 roundings at the weights' scale
        assert_close_float32(p.detach().numpy(), ref.params[n], terms=16)
    w = "bert.classifier.weight"
    assert np.abs(ref.params[w] - start[w]).min() > 1e-4  # every weight of the classifier moved, far beyond rounding
    # torch's AdamW (bias-corrected, decay by multiplication) is another optimiser: it ends elsewhere
    set_seed(5)
    other = REGISTRY["monobert"](checkpoint=tiny_bert, max_length=32)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", real)
    train(other, _pairs(32), seed=1, cfg=Training(**dict(vars(CFG), optimizer="adamw")), progress=False)
    assert np.abs(dict(other.named_parameters())[w].detach().numpy() - ref.params[w]).max() > 1e-4


def test_the_optimisers_state_resumes_to_the_same_weights(tiny_bert, tmp_path):
    """A run stopped after its third update (its state saved: weights, BertAdamW's moments, the schedule) and resumed
    ends with the weights and history of a run that never stopped, bit for bit."""
    set_seed(5)
    whole = REGISTRY["monobert"](checkpoint=tiny_bert, max_length=32)
    ref = train(whole, _pairs(32), seed=1, cfg=CFG, progress=False)

    class Stopped(BaseException):
        pass

    state = ResumeState(tmp_path, "run", every_s=1e-9)  # a state after every update
    save = state.save

    def save_then_stop(s):
        save(s)
        if s["step"] == 3:
            raise Stopped

    state.save = save_then_stop
    set_seed(5)
    with pytest.raises(Stopped):
        train(REGISTRY["monobert"](checkpoint=tiny_bert, max_length=32), _pairs(32), seed=1, cfg=CFG, progress=False,
              resume=state)
    saved = torch.load(tmp_path / ResumeState.FILE, weights_only=True)
    assert saved["step"] == 3 and {"m", "v"} <= set(next(iter(saved["optimizer"]["state"].values())))
    set_seed(5)
    model = REGISTRY["monobert"](checkpoint=tiny_bert, max_length=32)
    resumed = train(model, _pairs(32), seed=1, cfg=CFG, progress=False, resume=ResumeState(tmp_path, "run"))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), whole.state_dict().values()))
    pd.testing.assert_frame_equal(resumed.history, ref.history, check_exact=True)
