"""CPU kernels that give the same floats on every x86-64 machine (``cpu_kernels=portable``, the default).

The math libraries pick their kernels by the CPU they find: ATen's AVX2 / AVX-512 code, MKL's code paths (other ones
on AMD than on Intel), oneDNN's JIT convolutions (their blocking follows the caches), Faiss's SIMD level and
OpenBLAS's core type. Each sums floats in its own order, so the same training run ends in other weights on another
machine, and a re-ranking in another order. ``portable`` pins each to the code every x86-64 CPU runs:

- ``ATEN_CPU_CAPABILITY=default``: ATen's kernels without AVX;
- ``MKL_CBWR=COMPATIBLE,STRICT``: MKL's conditional numerical reproducibility (Intel and non-Intel CPUs, any
  alignment);
- oneDNN off in PyTorch (``torch.backends.mkldnn``, set where an artifact is computed): convolutions by ATen and MKL;
- ``FAISS_SIMD_LEVEL=NONE`` and ``OPENBLAS_CORETYPE=Prescott``: Faiss's and OpenBLAS's generic code;
- one PyTorch thread where an artifact is computed (``cpu_threads``, runner/jobs.py).

The variables are read when the libraries load, so ``leakexp`` and ``leakexp-run`` set them before anything imports
them (:func:`pin_environment`); their child processes (grid workers, launchers' jobs) inherit them. The mode comes
from the command line (``cpu_kernels=native``) or ``$LEAKEXP_CPU_KERNELS``; ``native`` lets each library choose
(faster on the CPU; bytes then depend on the machine). It is part of no key. A GPU's kernels are not pinned.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence

MODES = ("portable", "native")
ENV = "LEAKEXP_CPU_KERNELS"


def portable_environment() -> dict[str, str]:
    """The variables that pin the math libraries to the kernels every x86-64 CPU runs (ATen's on any machine)."""
    env = {"ATEN_CPU_CAPABILITY": "default", "FAISS_SIMD_LEVEL": "NONE"}
    if platform.machine().lower() in ("x86_64", "amd64"):
        env.update(MKL_CBWR="COMPATIBLE,STRICT", OPENBLAS_CORETYPE="Prescott")
    return env


def requested(argv: Sequence[str] = (), environ=None) -> str:
    """The mode a command line asks for: its last ``cpu_kernels=`` override, else ``$LEAKEXP_CPU_KERNELS``, else
    ``portable``."""
    environ = os.environ if environ is None else environ
    mode = environ.get(ENV) or "portable"
    for arg in argv:
        if arg.startswith(("cpu_kernels=", "+cpu_kernels=", "++cpu_kernels=")):
            mode = arg.split("=", 1)[1]
    return mode


def pin_environment(argv: Sequence[str] = ()) -> str:
    """Set the variables of the mode the command line asks for (before the math libraries load); returns the mode.

    An unknown mode is left to the configuration's validation, which names the setting."""
    mode = requested(argv)
    if mode == "portable":
        os.environ.update(portable_environment())
        os.environ[ENV] = mode
    elif mode == "native":
        os.environ[ENV] = mode
    return mode


def in_effect() -> str:
    """``portable`` when this process's variables pin the kernels and no math library loaded before they were set
    (checked by value: a library loaded with them set is pinned), else ``native``."""
    env = portable_environment()
    pinned = all(os.environ.get(k) == v for k, v in env.items())
    return "portable" if pinned and os.environ.get(ENV) == "portable" else "native"


def use_onednn(mode: str) -> None:
    """PyTorch's oneDNN kernels on (native) or off (portable: its JIT convolutions block by the CPU's caches)."""
    import torch

    torch.backends.mkldnn.enabled = mode != "portable"
