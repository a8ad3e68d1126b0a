"""One trainer for every re-ranker: one epoch over a cell's training set (paper, Section 4).

The seed fixes the shuffling of training queries (and, set before the model is built, its random
initialisation). A query's positive and negative instance are always in the same batch.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from leakexp.models.base import Reranker, to_device


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. a NaN loss); the cell gets no done marker."""


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = 32  # pairs per optimiser step (before accumulation)
    lr: float = 1e-3
    optimizer: str = "adam"
    weight_decay: float = 0.0
    warmup_steps: int = 0
    grad_accum: int = 1
    max_grad_norm: float | None = None


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resolve_device(device: str = "auto") -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device={device} but no CUDA device is available; use device=cpu or device=auto")
    return device


def _optimizer(model: Reranker, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=cfg.lr, scale_parameter=False, relative_step=False, weight_decay=cfg.weight_decay)
    raise ValueError(f"model.train.optimizer={cfg.optimizer!r} is unknown; use adam, adamw or adafactor")


def pairs_of(instances: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Aligned positive and negative rows of each training query (pair id order)."""
    pos = instances[instances.label == 1].sort_values("pair", kind="mergesort").reset_index(drop=True)
    neg = instances[instances.label == 0].sort_values("pair", kind="mergesort").reset_index(drop=True)
    if len(pos) != len(neg) or not (pos.pair.values == neg.pair.values).all():
        raise TrainingError("the training set does not hold exactly one positive and one negative per query")
    return pos, neg


def train(model: Reranker, instances: pd.DataFrame, *, seed: int, cfg: TrainConfig, device: str = "cpu",
          progress: bool = True) -> dict:
    """Train ``model`` in place for one epoch; returns the figures of the training manifest."""
    pos, neg = pairs_of(instances)
    order = np.random.default_rng(seed).permutation(len(pos))  # the seed shuffles the training queries
    model.prepare(instances)
    model.to(device).train()
    opt = _optimizer(model, cfg)
    n_steps = math.ceil(len(order) / (cfg.batch_size * cfg.grad_accum))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
    )
    amp = device.startswith("cuda") and torch.cuda.is_bf16_supported()
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    start, steps, losses = time.time(), 0, []
    bar = tqdm(total=len(order) * 2, desc=f"train {model.name}", unit="inst", disable=not progress)
    micro = [order[s : s + cfg.batch_size] for s in range(0, len(order), cfg.batch_size)]
    opt.zero_grad(set_to_none=True)
    for m, idx in enumerate(micro):
        p, n = pos.iloc[idx], neg.iloc[idx]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            if model.objective == "pairwise":
                loss = model.pair_loss(
                    to_device(model.featurize(p["query"].tolist(), p["text"].tolist()), device),
                    to_device(model.featurize(n["query"].tolist(), n["text"].tolist()), device),
                )
            else:  # both instances of a query side by side in one batch
                both = _interleave(p, n)
                feats = to_device(model.featurize(both["query"].tolist(), both["text"].tolist()), device)
                loss = model.pointwise_loss(feats, torch.tensor(both["label"].values, device=device))
        if not torch.isfinite(loss):
            bar.close()
            raise TrainingError(f"{model.name}: loss became {loss.item()} at step {steps + 1}; lower the "
                                "learning rate or check the training set")
        (loss / cfg.grad_accum).backward()
        losses.append(loss.item())
        if (m + 1) % cfg.grad_accum == 0 or m + 1 == len(micro):
            if cfg.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            steps += 1
        bar.update(2 * len(idx))
        bar.set_postfix(loss=f"{losses[-1]:.4f}", inst_s=f"{bar.n / max(time.time() - start, 1e-9):.0f}")
    bar.close()
    seconds = time.time() - start
    tail = losses[-max(1, len(losses) // 10):]
    return {
        "instances": int(2 * len(order)), "steps": steps, "planned_steps": n_steps,
        "first_loss": round(losses[0], 6) if losses else None,
        "final_loss": round(float(np.mean(tail)), 6) if losses else None,
        "seconds": round(seconds, 3), "instances_per_s": round(2 * len(order) / max(seconds, 1e-9), 1),
        "device": device,
    }


def _interleave(p: pd.DataFrame, n: pd.DataFrame) -> pd.DataFrame:
    """Positive, negative, positive, negative, … (each query's pair adjacent)."""
    rows = []
    for a, b in zip(p.itertuples(index=False), n.itertuples(index=False)):
        rows += [a, b]
    return pd.DataFrame(rows, columns=p.columns)
