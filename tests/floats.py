"""Float comparisons that hold on any CPU.

Two computations of the same value in another order (another batch row order, batch shape or kernel: AVX2 against
AVX-512 against PyTorch's ``default`` kernels) round differently: a sum of n float32 terms carries an error of at
most (n - 1) * eps * sum(|terms|). Bit-equality is asserted only where the same kernel runs the same inputs in the same
order; elsewhere these bounds, from the dtype and the size of the reduction, are the tolerance.
"""

from __future__ import annotations

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)  # 1.19e-7


def assert_close_float32(actual, expected, *, terms: int, scale: float | None = None) -> None:
    """``actual`` equals ``expected`` up to the rounding of float32 sums of ``terms`` terms each, relative to ``scale``
    (the magnitude of the summed terms; default: the largest |expected|, at least 1)."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = max(1.0, float(np.abs(expected).max(initial=0.0))) if scale is None else scale
    bound = terms * EPS32 * scale
    worst = float(np.abs(actual - expected).max(initial=0.0))
    assert worst <= bound, f"max |difference| {worst:.3g} exceeds the float32 rounding bound {bound:.3g} ({terms} terms)"
