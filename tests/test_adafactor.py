"""Mesh TensorFlow's Adafactor (leakexp.lib.adafactor) against a per-parameter numpy transcription of
``mesh_tensorflow/optimize.py`` (tensorflow/mesh @ da90793, AdafactorOptimizer, lines 208-419)."""

import math

import numpy as np
import pytest
import torch

from floats import EPS32, assert_close_float32
from leakexp.lib.adafactor import MeshAdafactor, factored_dims


def rms(x: np.ndarray) -> np.float32:
    return np.sqrt(np.mean(np.square(x), dtype=np.float32))  # reduce_rms, optimize.py lines 451-452


class Reference:
    """One variable as ``AdafactorOptimizer.apply_grad`` updates it (optimize.py lines 307-378), in float32 numpy,
    with the class defaults (lines 211-222) and the decay rate of ``adafactor_decay_rate_pow`` (lines 405-419)."""

    def __init__(self, var, lr, beta1=0.0, clipping_threshold=1.0, epsilon1=1e-30, epsilon2=1e-3,
                 min_dim_size_to_factor=128, start_step=0):
        self.var = np.array(var, dtype=np.float32)
        self.lr, self.beta1, self.clip = np.float32(lr), beta1, clipping_threshold
        self.eps1, self.eps2 = np.float32(epsilon1), np.float32(epsilon2)
        self.global_step = start_step
        shape = self.var.shape
        # _factored_dims (lines 264-286): the two largest dims, if the second is >= min_dim_size_to_factor
        dims = sorted(range(len(shape)), key=lambda d: -shape[d]) if len(shape) >= 2 else []
        self.dims = tuple(dims[:2]) if dims and shape[dims[1]] >= min_dim_size_to_factor else None
        if self.dims:  # vr: shape - d0, vc: shape - d1 (lines 315-323)
            self.vr = np.zeros([n for i, n in enumerate(shape) if i != self.dims[0]], np.float32)
            self.vc = np.zeros([n for i, n in enumerate(shape) if i != self.dims[1]], np.float32)
        else:
            self.v = np.zeros(shape, np.float32)  # lines 325-327
        self.m = np.zeros(shape, np.float32)  # lines 328-331

    def apply_grad(self, grad):
        grad = np.asarray(grad, np.float32)
        decay = np.float32(1) - np.float32(self.global_step + 1.0) ** np.float32(-0.8)  # lines 418-419, offset 0, float32
        grad_squared = np.square(grad) + self.eps1  # line 334
        old_val = self.var
        update_scale = np.maximum(rms(old_val), self.eps2) * self.lr  # lines 304-305, 337-339
        mixing = np.float32(1.0) - decay  # line 342
        if self.dims:
            d0, d1 = self.dims
            self.vr = self.vr * decay + grad_squared.mean(axis=d0, dtype=np.float32) * mixing  # lines 345-349
            self.vc = self.vc * decay + grad_squared.mean(axis=d1, dtype=np.float32) * mixing  # lines 347-350
            d1_in_vr = d1 if d1 < d0 else d1 - 1
            long_term_mean = self.vr.mean(axis=d1_in_vr, keepdims=True, dtype=np.float32)  # line 354
            r_factor = 1 / np.sqrt(self.vr / long_term_mean)  # line 355
            c_factor = 1 / np.sqrt(self.vc)  # line 356
            x = grad * np.expand_dims(r_factor, d0) * np.expand_dims(c_factor, d1)  # line 357
        else:
            self.v = self.v * decay + grad_squared * mixing  # line 359
            x = grad / np.sqrt(self.v)  # line 362
        if self.clip is not None:  # lines 363-366
            x = x / np.maximum(np.float32(1.0), rms(x) / np.float32(self.clip))
        subtrahend = x * update_scale  # line 367
        if self.beta1:  # lines 368-372
            self.m = self.m * np.float32(self.beta1) + subtrahend * np.float32(1.0 - self.beta1)
            subtrahend = self.m
        self.var = self.var - subtrahend  # line 376
        self.global_step += 1  # utils.py: tf.assign_add(global_step, 1) after every update


# t5-base-like shapes, scaled down: factored matrices (both orientations, a tie), an unfactored matrix (the 32 x 12
# relative-attention bias: 12 < 128), vectors, a 3-d tensor factored over its two largest dims, two of one shape
SHAPES = [(160, 130), (130, 160), (128, 128), (32, 12), (130,), (7,), (3, 200, 140), (160, 130)]


def _run(steps: int, **kwargs):
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=g) * (0.05 if i % 2 else 1.0)) for i, s in enumerate(SHAPES)]
    params[5].data.zero_()  # a zero-initialised parameter: the step size is lr * epsilon2
    refs = [Reference(p.detach().numpy(), **kwargs) for p in params]
    for p, ref in zip(params, refs):
        ref.start = ref.var.copy()
    opt = MeshAdafactor(params, **kwargs)
    for _ in range(steps):
        for p, ref in zip(params, refs):
            p.grad = torch.randn(p.shape, generator=g) * 1e-2
            ref.apply_grad(p.grad.numpy())
        opt.step()
    return params, refs, opt


@pytest.mark.parametrize("kwargs", [dict(lr=1e-3), dict(lr=1e-2, beta1=0.9), dict(lr=1e-3, start_step=999_900),
                                    dict(lr=1e-3, clipping_threshold=None)])
def test_mesh_adafactor_equals_a_transcription_of_mesh_tensorflow(kwargs):
    """Five updates of factored and unfactored shapes equal the per-variable numpy reference to float32 rounding
    (each update is one clipped, scaled step: relative to the parameters' scale)."""
    params, refs, opt = _run(5, **kwargs)
    for p, ref in zip(params, refs):
        assert_close_float32(p.detach().numpy(), ref.var, terms=64, scale=max(1.0, float(np.abs(ref.var).max())))
    for p, ref in zip(params, refs):
        assert (ref.var != ref.start).mean() > 0.99  # the updates moved the parameter
        state = opt.state[p]
        if ref.dims:
            np.testing.assert_allclose(state["vr"].numpy(), ref.vr, rtol=64 * EPS32, atol=0)
            np.testing.assert_allclose(state["vc"].numpy(), ref.vc, rtol=64 * EPS32, atol=0)
        else:
            np.testing.assert_allclose(state["v"].numpy(), ref.v, rtol=64 * EPS32, atol=0)
        assert state["step"] == 5


def test_mesh_adafactor_moves_every_parameter_by_a_parameter_scaled_step():
    """The first update (decay 0, so v = g^2 + 1e-30): an unfactored parameter moves by lr * max(RMS(p), 1e-3) *
    sign(g) (|x| = 1, RMS 1: no clipping); a zero parameter by lr * 1e-3."""
    p = torch.nn.Parameter(torch.tensor([2.0, -2.0, 2.0, -2.0]))
    z = torch.nn.Parameter(torch.zeros(3))
    opt = MeshAdafactor([p, z], lr=1e-3)
    p.grad = torch.tensor([0.5, -3.0, 1e-4, 2.0])
    z.grad = torch.tensor([1.0, -1.0, 4.0])
    opt.step()
    np.testing.assert_allclose(p.detach().numpy(), [2 - 2e-3, -2 + 2e-3, 2 - 2e-3, -2 - 2e-3], rtol=1e-6)
    np.testing.assert_allclose(z.detach().numpy(), [-1e-6, 1e-6, -1e-6], rtol=1e-5)


def test_mesh_factors_the_two_largest_dims_from_128_entries():
    """optimize.py lines 264-286: t5-base's matrices are factored, its 32 x 12 relative-attention bias and its
    vectors are not (Hugging Face's Adafactor factors every matrix)."""
    assert factored_dims((32128, 768)) == (0, 1) and factored_dims((768, 3072)) == (1, 0)
    assert factored_dims((32, 12)) is None and factored_dims((768,)) is None and factored_dims((127, 4096)) is None
    assert factored_dims((3, 200, 140)) == (1, 2) and factored_dims((128, 128)) == (0, 1)


def test_mesh_adafactor_refuses_weight_decay():
    with pytest.raises(ValueError, match="no weight decay"):
        MeshAdafactor([{"params": [torch.nn.Parameter(torch.ones(2))], "weight_decay": 0.01}], lr=1e-3)


def test_bf16_parameters_are_updated_in_fp32_and_written_back():
    g = torch.Generator().manual_seed(3)
    p32 = torch.nn.Parameter(torch.randn(130, 140, generator=g))
    p16 = torch.nn.Parameter(p32.detach().to(torch.bfloat16))
    grad = torch.randn(130, 140, generator=g)
    for p in (p32, p16):
        p.grad = grad.to(p.dtype)
    MeshAdafactor([p32], lr=1e-2).step()
    MeshAdafactor([p16], lr=1e-2).step()
    assert p16.dtype == torch.bfloat16
    assert math.isclose(float((p16.detach().float() - p32.detach()).abs().max()), 0.0, abs_tol=2 ** -6 * 4)
