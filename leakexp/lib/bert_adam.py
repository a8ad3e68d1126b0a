"""BERT's ``AdamWeightDecayOptimizer``, the optimiser dl4marco-bert fine-tuned monoBERT with.

dl4marco-bert's ``run_msmarco.py`` trains through ``optimization.create_optimizer`` (nyu-dl/dl4marco-bert @ a75f26a
``optimization.py`` lines 25-81, 84-154; the same as google-research/bert @ eedf571 ``optimization.py`` lines 25-84,
87-157). One update of a variable ``param`` with gradient ``g``, after the gradients are clipped to a global norm
of 1.0 (line 74)::

    m <- 0.9 m + 0.1 g;  v <- 0.999 v + 0.001 g^2             # lines 128-132
    update = m / (sqrt(v) + 1e-6)                            # line 134
    update += 0.01 param   unless the name holds LayerNorm, layer_norm or bias        # lines 143-144, 65
    param <- param - lr update                               # lines 146-148

It is not ``torch.optim.AdamW``: there is no bias correction (torch divides m by 1 - 0.9^t and v by 1 - 0.999^t),
so the early updates differ most: the update's size is (1 - 0.9^t) / sqrt(1 - 0.999^t) times torch's for a steady
gradient: 3.2 at the first update, 6.5 at the tenth, 3.2 at the hundredth, 1.26 at the thousandth. The decay is
added to the update before the learning rate multiplies it (torch multiplies the parameter by 1 - lr * wd, which
float32 rounds to 1 - 6e-8 at monoBERT's lr 3e-6 and wd 0.01, twice the decay, and to 1 below lr 1.5e-6). The
moments are kept in the parameter's dtype, as TF's float32 variables; the state is plain tensors, so
``state_dict`` saves and restores a run.
"""

from __future__ import annotations

import torch


class BertAdamW(torch.optim.Optimizer):
    """``AdamWeightDecayOptimizer.apply_gradients`` over all tensors of a group at once (see the module's docstring);
    each group's ``weight_decay`` is the decay rate of its parameters (0 for the excluded ones)."""

    def __init__(self, params, lr: float, weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"BertAdamW: lr={lr}, eps={eps}, weight_decay={weight_decay}, betas={betas}")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=tuple(betas), eps=eps))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                if not self.state[p]:
                    self.state[p]["m"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    self.state[p]["v"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            grads = [p.grad for p in params]
            m, v = [self.state[p]["m"] for p in params], [self.state[p]["v"] for p in params]
            beta1, beta2 = group["betas"]
            torch._foreach_mul_(m, beta1)
            torch._foreach_add_(m, grads, alpha=1.0 - beta1)
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, grads, grads, value=1.0 - beta2)
            denom = torch._foreach_sqrt(v)
            torch._foreach_add_(denom, group["eps"])
            update = torch._foreach_div(m, denom)
            del denom
            if group["weight_decay"]:
                torch._foreach_add_(update, params, alpha=group["weight_decay"])
            torch._foreach_add_(params, update, alpha=-group["lr"])
        return loss
