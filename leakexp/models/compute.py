"""How a Hugging Face re-ranker computes on a GPU, never what it is: bf16 scoring weights, static shapes for
``torch.compile``, and monoT5's two options beyond the reference. Part of no checkpoint; the stages set it on CUDA
from ``precision.train_compile`` / ``precision.rerank_compile`` and ``models.<name>.cuda`` (docs/models.md, "How
monoT5 and monoBERT compute on a GPU").

    model.use(Compute(bf16_weights=True, compile=True))   # before scoring; a model so prepared is not saved
    model.score_tokens(queries, docs, batch_size=128, device="cuda")
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal, TYPE_CHECKING

from leakexp.runner.schema import PositiveInt, Section

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import torch


# widths of a compiled model's batches are padded up to a multiple of this (capped at the model's max_length), so
# a run compiles at most ceil(max_length / 64) widths: 8 at 512 tokens
WIDTH_MULTIPLE = 64


@dataclass(frozen=True)
class Compute:
    """How a model computes; the default is the path of the references (fp32 weights, bf16 under autocast on CUDA,
    eager kernels, batches as wide as their longest input).

    - ``bf16_weights`` (scoring only): the weights cast to bf16 once, autocast off; each model keeps its score head
      in fp32 (monoT5: its one decoder step, all but the cross-attention's keys and values; monoBERT: the
      classifier). Training always keeps fp32 weights.
    - ``compile``: the scoring core or the training loss through ``torch.compile(fullgraph=True, dynamic=False)``
      over static shapes: widths padded to a multiple of :data:`WIDTH_MULTIPLE`, a scoring run's last batch padded
      with repeated rows whose scores are dropped.
    - ``bias_once`` (monoT5): the encoder's position bias merged with the padding mask once per forward, not in
      every layer.
    - ``single_query`` (monoT5, scoring): the decoder's cross-attention computed for its one query, its key and
      value projections folded into the query and the output (no (B, L, H * d_kv) keys and values).
    - ``legacy``: the path before the mask was decided on the host (a 4D mask in every batch on CUDA, the decoder's
      cache, unpinned batches): the benchmark's baseline row, never set by a stage.
    """

    bf16_weights: bool = False
    compile: bool = False
    bias_once: bool = False
    single_query: bool = False
    legacy: bool = False


def bucket_width(width: int, max_length: int, multiple: int) -> int:
    """``width`` padded up to a multiple of ``multiple`` (0: unchanged), never beyond ``max_length`` (nor below
    ``width``)."""
    if not multiple or width == 0:
        return width
    return max(width, min(math.ceil(width / multiple) * multiple, max_length))


def graph_bound(max_length: int) -> int:
    """How many graphs a compiled core may build in a run: every width bucket, with and without a padding mask, at
    a full and at a last, smaller micro-batch; ``torch._dynamo.config.recompile_limit`` is raised to it."""
    return 4 * math.ceil(max_length / WIDTH_MULTIPLE)


def compiled(fn: Callable, max_length: int) -> Callable:
    """``fn`` through ``torch.compile`` with one graph per shape (``fullgraph=True``: a graph break is an error,
    ``dynamic=False``: static shapes), the recompile limit raised to :func:`graph_bound` (Dynamo's default, 8,
    would fall back to eager kernels after the eighth shape)."""
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, graph_bound(max_length))
    return torch.compile(fn, fullgraph=True, dynamic=False)


class CudaSettings(Section):
    """``models.<name>.cuda``: how the model computes on CUDA, read there only (a CPU run ignores the block and no
    CPU key holds it). ``score_batch_size`` sets speed, not scores (part of no key); the others are part of the
    keys of the stages they change on CUDA."""

    # documents per scoring batch on CUDA (null: train.score_batch_size); experiment=paper: 128
    score_batch_size: PositiveInt | None = None
    # training pairs per micro-batch on CUDA (null: train.batch_size); an update keeps train.batch_size x
    # train.grad_accum pairs, in (that / micro_batch) micro-batches
    micro_batch: PositiveInt | None = None
    # how precision.rerank_bf16 scores: autocast (fp32 weights, bf16 matmuls) or bf16 (weights cast once, score
    # head in fp32); fp32 throughout when precision.rerank_bf16 is false
    rerank_weights: Literal["autocast", "bf16"] = "autocast"
    # whether this model's scoring core is compiled where precision.rerank_compile is on (false: it scores eagerly);
    # experiment=paper: monoBERT false (compiled, it scored 0.57x as fast as eagerly on an H200: docs/models.md)
    rerank_compile: bool = True


class T5CudaSettings(CudaSettings):
    """monoT5's ``cuda:`` block: :class:`CudaSettings` and its two options beyond the reference (default off until
    a GPU measures them faster)."""

    position_bias_once: bool = False  # the encoder's position bias + padding mask built once per forward
    single_query_cross_attention: bool = False  # the decoder's cross-attention for its one query (scoring)


def micro_batch_error(name: str, cuda: CudaSettings | None, batch_size: int, grad_accum: int) -> str:
    """Why ``models.<name>.cuda.micro_batch`` cannot cut an update into micro-batches ('' when it can)."""
    m = getattr(cuda, "micro_batch", None)
    pairs = batch_size * grad_accum
    if m is None or pairs % m == 0:
        return ""
    divisors = [d for d in range(1, pairs + 1) if pairs % d == 0]
    return (f"models.{name}.cuda.micro_batch={m} does not divide the {pairs} pairs of an update (train.batch_size "
            f"{batch_size} x train.grad_accum {grad_accum}); use one of {', '.join(map(str, divisors))} or null")
