"""The two Adafactors monoT5's recipes train with, each updating every parameter of one shape in one batch of tensor
ops: Mesh TensorFlow's (``MeshAdafactor``), the optimiser the SPIRE-22 authors trained monoT5 with, and Hugging
Face's as PyGaggle's recipe runs it (``Adafactor``).

The authors ran ``t5_mesh_transformer`` (webis-de/SPIRE-22 @ f3ab030, ``src/main/bash/train-mono-t5.sh`` lines 18-28)
with the T5-base operative config, whose optimiser is ``mesh_tensorflow.optimize.AdafactorOptimizer`` with its
defaults (tensorflow/mesh @ da90793, ``mesh_tensorflow/optimize.py`` lines 211-222; the same values stand in T5's
operative configs, e.g. text-to-text-transfer-transformer ``t5/models/test_data/operative_config.gin`` lines 24-33):
multiply_by_parameter_scale=True, decay_rate = ``adafactor_decay_rate_pow`` (exponent 0.8, lines 405-419),
beta1=0.0, clipping_threshold=1.0, factored=True, epsilon1=1e-30, epsilon2=1e-3, min_dim_size_to_factor=128.

One update of a variable ``var`` with gradient ``g`` at global step ``s`` (``apply_grad``, lines 307-378)::

    decay = 1 - (s + 1)^-0.8                                   # lines 405-419 (offset 0)
    g2 = g^2 + epsilon1                                        # line 334
    scale = lr * max(RMS(var), epsilon2)                       # lines 288-305, 337-341
    factored (the two largest dims d0 >= d1, d1 >= 128; lines 264-286):
        vr <- decay vr + (1 - decay) mean_d0(g2);  vc <- decay vc + (1 - decay) mean_d1(g2)     # lines 345-350
        x = g * rsqrt(vr / mean_d1(vr)) * rsqrt(vc)                                           # lines 354-357
    else:  v <- decay v + (1 - decay) g2;  x = g * rsqrt(v)                                   # lines 359-362
    x <- x / max(1, RMS(x) / clipping_threshold)               # lines 363-366
    sub = x * scale;  with beta1: m <- beta1 m + (1 - beta1) sub, sub = m                     # lines 367-372
    var <- var - sub                                           # line 376

It differs from Hugging Face's Adafactor as PyGaggle's recipe runs it (``Adafactor`` below) in the
step size (lr times the parameter's RMS, at least 1e-3, not lr), in which tensors it factors (the two largest
dimensions, only when the smaller is at least 128: t5-base's 32 x 12 relative-attention bias keeps a full second
moment; HF factors every matrix), and it has no weight decay. Every parameter of one (shape, dtype, device, step) is
updated in one batch of tensor ops, with no host sync.

``start_step``: Mesh TF's global step before the first update (``s`` above). The authors' run continued the
pre-trained checkpoint's step (T5 README.md line 252: pre-trained for 1,000,000 steps; the released checkpoint is
``model.ckpt-999900``, castorini/pygaggle ``docs/experiments-monot5-tpu.md`` line 261) and restored its second
moments with it; Hugging Face's t5-base carries no optimiser state, so leakexp starts both at 0 (a fresh optimiser)
by default (``train.adafactor_start_step`` of a model's config sets it): with the step continued but the moments at zero the decay would be 1 - 1.6e-5 and every update for tens
of thousands of steps a clipped, sign-like one that the authors' run never made.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def factored_dims(shape: tuple[int, ...], min_dim_size_to_factor: int = 128) -> tuple[int, int] | None:
    """The two dimensions Mesh TF factors a second moment over (``_factored_dims``, optimize.py lines 264-286): the
    two largest (ties: the earlier first, Python's stable sort), when the smaller of them has at least
    ``min_dim_size_to_factor`` entries; else None."""
    if len(shape) < 2:
        return None
    order = sorted(range(len(shape)), key=lambda d: -shape[d])
    if shape[order[1]] < min_dim_size_to_factor:
        return None
    return order[0], order[1]


class ShapeBatched(torch.optim.Optimizer):
    """An optimiser that updates the parameters of one (shape, dtype, device, step) together: ``step`` groups them,
    a subclass makes a parameter's first state (``_new_state``) and one update of a group (``_update``, given the
    group's step before it)."""

    def _new_state(self, group: dict, p: torch.Tensor) -> dict:
        raise NotImplementedError

    def _update(self, group: dict, params: list[torch.Tensor], shape: tuple, dtype, step: int) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            buckets: dict[tuple, list[torch.Tensor]] = {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Adafactor does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state.update(self._new_state(group, p))
                buckets.setdefault((tuple(p.shape), p.dtype, p.device, state["step"]), []).append(p)
            for (shape, dtype, _, step), params in buckets.items():
                self._update(group, params, shape, dtype, step)
        return loss

    @staticmethod
    def _stack(tensors: list[torch.Tensor]) -> torch.Tensor:
        return tensors[0].unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)

    @staticmethod
    def _write(states: list[dict], key: str, value: torch.Tensor) -> None:
        if len(states) > 1:  # one parameter's state is a view of the stacked tensor: updated in place already
            torch._foreach_copy_([s[key] for s in states], list(value.unbind(0)))


class MeshAdafactor(ShapeBatched):
    """``mesh_tensorflow.optimize.AdafactorOptimizer`` with its defaults and an explicit learning rate (the
    schedule's: T5's ``constant_0_001.gin`` gives 1e-3 at every step); see the module's docstring."""

    def __init__(self, params, lr: float, beta1: float = 0.0, clipping_threshold: float | None = 1.0,
                 epsilon1: float = 1e-30, epsilon2: float = 1e-3, decay_exponent: float = 0.8,
                 multiply_by_parameter_scale: bool = True, factored: bool = True, min_dim_size_to_factor: int = 128,
                 start_step: int = 0):
        if not 0.0 <= beta1 < 1.0:
            raise ValueError(f"beta1={beta1}: must be in [0, 1)")
        if start_step < 0:
            raise ValueError(f"start_step={start_step}: must be >= 0")
        super().__init__(params, dict(lr=lr, beta1=beta1, clipping_threshold=clipping_threshold, epsilon1=epsilon1,
                                      epsilon2=epsilon2, decay_exponent=decay_exponent,
                                      multiply_by_parameter_scale=multiply_by_parameter_scale, factored=factored,
                                      min_dim_size_to_factor=min_dim_size_to_factor, weight_decay=0.0))
        for group in self.param_groups:
            if group.get("weight_decay", 0.0):
                raise ValueError("Mesh TF's Adafactor has no weight decay; set weight_decay: 0")
        self.start_step = int(start_step)

    def _dims(self, group: dict, shape: tuple) -> tuple[int, int] | None:
        return factored_dims(shape, group["min_dim_size_to_factor"]) if group["factored"] else None

    def _new_state(self, group: dict, p: torch.Tensor) -> dict:
        dims = self._dims(group, tuple(p.shape))
        zeros = dict(dtype=torch.float32, device=p.device)
        state = {}
        if dims:
            d0, d1 = dims
            state["vr"] = torch.zeros([n for i, n in enumerate(p.shape) if i != d0], **zeros)
            state["vc"] = torch.zeros([n for i, n in enumerate(p.shape) if i != d1], **zeros)
        else:
            state["v"] = torch.zeros(p.shape, **zeros)
        if group["beta1"]:
            state["m"] = torch.zeros(p.shape, **zeros)
        return state

    def _update(self, group: dict, params: list[torch.Tensor], shape: tuple, dtype, step: int) -> None:
        """One update of the ``len(params)`` parameters of ``shape`` whose state is at ``step`` (0: none yet)."""
        states = [self.state[p] for p in params]
        for s in states:
            s["step"] = step + 1
        n = len(params)
        global_step = self.start_step + step  # Mesh TF's global step before this update
        # in float32 as TF computes it (tf.pow of a float32 step; mixing = 1 - decay, line 342): at a continued
        # step near 1e6 the mixing rate 1.6e-5 keeps only ~3 significant digits, and Mesh TF used those
        decay32 = np.float32(1.0) - np.power(np.float32(global_step + 1.0), np.float32(-group["decay_exponent"]))
        decay, mixing = float(decay32), float(np.float32(1.0) - decay32)
        grad = self._stack([p.grad for p in params]).float()  # (N, *shape)
        sq = grad * grad + group["epsilon1"]
        dims = self._dims(group, shape)
        if dims:
            d0, d1 = dims[0] + 1, dims[1] + 1  # in the stacked tensor
            vr = self._stack([s["vr"] for s in states])
            vc = self._stack([s["vc"] for s in states])
            vr.mul_(decay).add_(sq.mean(dim=d0), alpha=mixing)
            vc.mul_(decay).add_(sq.mean(dim=d1), alpha=mixing)
            self._write(states, "vr", vr)
            self._write(states, "vc", vc)
            d1_in_vr = d1 if d1 < d0 else d1 - 1  # vr lacks d0
            r = (vr / vr.mean(dim=d1_in_vr, keepdim=True)).rsqrt_().unsqueeze(d0)
            x = (r * vc.rsqrt().unsqueeze(d1)).mul_(grad)
        else:
            v = self._stack([s["v"] for s in states])
            v.mul_(decay).add_(sq, alpha=mixing)
            self._write(states, "v", v)
            x = v.rsqrt().mul_(grad)
        broadcast = (n, *([1] * len(shape)))
        root = math.sqrt(max(1, math.prod(shape)))  # RMS = L2 norm / sqrt(numel), without a squared copy
        if group["clipping_threshold"] is not None:
            rms = torch.linalg.vector_norm(x.reshape(n, -1), dim=1) / root
            x.div_((rms / group["clipping_threshold"]).clamp_(min=1.0).reshape(broadcast))
        if group["multiply_by_parameter_scale"]:  # the parameters' RMS before the update, in fp32
            norms = torch.stack(torch._foreach_norm(params)).float() if dtype == torch.float32 else \
                torch.linalg.vector_norm(self._stack(params).float().reshape(n, -1), dim=1)
            scale = (norms / root).clamp_(min=group["epsilon2"]) * group["lr"]
            x.mul_(scale.reshape(broadcast))
        else:
            x.mul_(group["lr"])
        if group["beta1"]:
            m = self._stack([s["m"] for s in states])
            m.mul_(group["beta1"]).add_(x, alpha=1.0 - group["beta1"])
            self._write(states, "m", m)
            x = m
        if dtype == torch.float32:
            torch._foreach_sub_(params, list(x.unbind(0)))
        else:  # low-precision parameters: computed in fp32, written back
            torch._foreach_copy_(params, list(self._stack(params).float().sub_(x).unbind(0)))


class Adafactor(ShapeBatched):
    """HF transformers' Adafactor as the monoT5 recipe runs it (HF Trainer ``adafactor=True``: lr given,
    ``scale_parameter=False, relative_step=False, warmup_init=False``, beta1=None, clip_threshold=1.0,
    decay_rate=-0.8, eps=(1e-30, 1e-3)), computed for all parameters of one shape in one batch of tensor ops.

    Per parameter, with t its step, beta2_t = 1 - t^-0.8 and G its gradient (the same as
    ``transformers.optimization.Adafactor.step``):
      matrices: R <- beta2_t R + (1 - beta2_t) mean_cols(G^2 + 1e-30), C likewise over rows,
                U = G / sqrt((R / mean(R)) C^T);  vectors: V <- beta2_t V + (1 - beta2_t)(G^2 + 1e-30), U = G / sqrt(V)
      U <- U / max(1, RMS(U)),   p <- p - lr * weight_decay * p,   p <- p - lr * U.
    HF's optimizer loops over the parameters in Python (t5-base: ~280 parameters, ~15 kernels each, every update);
    here the parameters of one (shape, dtype, device, step) are stacked, so an update is ~15 kernels per distinct
    shape (t5-base: 7), with no host sync. Equal to HF's update up to float rounding (tests/test_train.py).

    ``torch.optim.Adafactor`` is not this optimiser: its step size is max(1e-3, RMS(p)) * min(lr, 1/sqrt(t))
    (HF's scale_parameter=True, relative_step=True with lr in place of 1e-2), not lr; it floors the variance
    estimate at eps1^2 instead of adding 1e-30 to G^2; it decays weights by lr * weight_decay with the un-scaled lr;
    and it reads each parameter's norm with ``.item()`` (a host sync per parameter).
    """

    def __init__(self, params, lr: float, weight_decay: float = 0.0, eps1: float = 1e-30, clip_threshold: float = 1.0,
                 decay_rate: float = -0.8):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, eps1=eps1, clip_threshold=clip_threshold,
                                      decay_rate=decay_rate))

    def _new_state(self, group: dict, p: torch.Tensor) -> dict:
        zeros = dict(dtype=torch.float32, device=p.device)
        if p.dim() >= 2:
            return {"exp_avg_sq_row": torch.zeros(p.shape[:-1], **zeros),
                    "exp_avg_sq_col": torch.zeros(p.shape[:-2] + p.shape[-1:], **zeros)}
        return {"exp_avg_sq": torch.zeros(p.shape, **zeros)}

    def _update(self, group: dict, params: list[torch.Tensor], shape: tuple, dtype, step: int) -> None:
        states = [self.state[p] for p in params]
        step += 1  # HF counts the update being made
        for s in states:
            s["step"] = step
        beta2t = 1.0 - math.pow(step, group["decay_rate"])
        grad = self._stack([p.grad for p in params]).float()  # (N, *shape)
        sq = grad * grad + group["eps1"]
        if len(shape) >= 2:
            row = self._stack([s["exp_avg_sq_row"] for s in states])
            col = self._stack([s["exp_avg_sq_col"] for s in states])
            row.mul_(beta2t).add_(sq.mean(dim=-1), alpha=1.0 - beta2t)
            col.mul_(beta2t).add_(sq.mean(dim=-2), alpha=1.0 - beta2t)
            r = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
            update = (r * col.unsqueeze(-2).rsqrt()).mul_(grad)
            self._write(states, "exp_avg_sq_row", row)
            self._write(states, "exp_avg_sq_col", col)
        else:
            var = self._stack([s["exp_avg_sq"] for s in states])
            var.mul_(beta2t).add_(sq, alpha=1.0 - beta2t)
            update = var.rsqrt().mul_(grad)
            self._write(states, "exp_avg_sq", var)
        numel = max(1, math.prod(shape))
        rms = update.reshape(len(params), -1).norm(dim=1) / math.sqrt(numel)
        update.div_((rms / group["clip_threshold"]).clamp_(min=1.0).reshape(-1, *([1] * len(shape))))
        update.mul_(group["lr"])
        wd = group["weight_decay"] * group["lr"]
        if dtype == torch.float32:
            if wd:
                torch._foreach_add_(params, params, alpha=-wd)
            torch._foreach_sub_(params, list(update.unbind(0)))
        else:  # low-precision parameters: computed in fp32, written back (as HF)
            p32 = self._stack(params).float()
            if wd:
                p32.add_(p32, alpha=-wd)
            p32.sub_(update)
            torch._foreach_copy_(params, list(p32.unbind(0)))
