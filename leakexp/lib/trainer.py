"""One trainer for every re-ranker: a budget of passes or updates over a cell's training set, with the references'
optimisers, schedules and clipping, a resumable state, and a per-update history of loss and learning rate.

Read it top to bottom: the settings (:class:`Training`), the optimiser and schedule, which pairs each update sees,
the batches, the resumable state, then :func:`train`, the loop. The seed fixes the order of the training pairs (and,
set before the model is built, its random initialisation). A query's positive and negative instance are always in
the same batch. A model is anything with the re-rankers' interface (``leakexp.models.base.Reranker``).

    result = train(model, instances, seed=3, cfg=Training.of(model_train, budget))  # a model's train:, the run's
    result["updates"], result.history        # manifest figures; DataFrame step, loss, lr, pairs
    write_history(result.history, out / "history.csv")
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import random
import signal
import threading
import time
import typing
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TYPE_CHECKING

import numpy as np
from pydantic import Field, ValidationError, model_validator
from tqdm.auto import tqdm

from leakexp.runner.config import model_config
from leakexp.runner.jobs import allocated_cpus
from leakexp.runner.schema import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, Section, section
from leakexp.runner.store import atomic_write_text

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd
    import torch
    from torch import nn


log = logging.getLogger(__name__)

class TrainingError(RuntimeError):
    """Training cannot go on (e.g. a NaN loss); the cell gets no done marker."""


# the optimisers a model trains with: adam | adamw (torch's) | bert_adamw (BERT's AdamWeightDecayOptimizer,
# dl4marco-bert: leakexp.lib.bert_adam) | adafactor (HF's, shape-batched) | adafactor_hf (HF's own loop) |
# adafactor_mesh (Mesh TensorFlow's, the authors' monoT5: leakexp.lib.adafactor)
Optimizer = Literal["adam", "adamw", "bert_adamw", "adafactor", "adafactor_hf", "adafactor_mesh"]
OPTIMIZERS = typing.get_args(Optimizer)


def set_seed(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# -- optimiser and schedule --------------------------------------------------------------------------------
def no_decay_parameter_names(model: nn.Module) -> set[str]:
    """Biases and normalisation weights: no weight decay (dl4marco-bert's exclude_from_weight_decay=["LayerNorm",
    "layer_norm", "bias"], google-research/bert optimization.py; HF Trainer.get_decay_parameter_names)."""
    from torch import nn

    out = set()
    for mod_name, module in model.named_modules():
        is_norm = isinstance(module, nn.LayerNorm) or "norm" in type(module).__name__.lower()
        for p_name, _ in module.named_parameters(recurse=False):
            if is_norm or p_name == "bias":
                out.add(f"{mod_name}.{p_name}" if mod_name else p_name)
    return out


def make_optimizer(model: nn.Module, cfg: Training) -> torch.optim.Optimizer:
    """The configured optimiser over trainable parameters, in two groups: with and without weight decay."""
    import torch

    skip = no_decay_parameter_names(model)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in named if n not in skip], "weight_decay": cfg.weight_decay},
              {"params": [p for n, p in named if n in skip], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    # on the CPU the fused kernel (one pass over each tensor) steps 3x faster than the default loop over tensors,
    # equal to it within float32 rounding: monoBERT's embedding matrix made the step a quarter of its training time;
    # on a GPU PyTorch's default (foreach) is kept
    fused = {"fused": True} if named and all(p.device.type == "cpu" for _, p in named) else {}
    from leakexp.lib.adafactor import Adafactor, MeshAdafactor  # torch optimisers: imported when one is built
    from leakexp.lib.bert_adam import BertAdamW

    if cfg.optimizer == "adam":
        return torch.optim.Adam(groups, lr=cfg.lr, eps=cfg.adam_eps, **fused)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, eps=cfg.adam_eps, **fused)
    if cfg.optimizer == "bert_adamw":  # dl4marco-bert's monoBERT: BERT's optimization.py (no bias correction)
        return BertAdamW(groups, lr=cfg.lr, eps=cfg.adam_eps)
    if cfg.optimizer == "adafactor":
        return Adafactor(groups, lr=cfg.lr)
    if cfg.optimizer == "adafactor_mesh":  # the authors' monoT5 (train-mono-t5.sh): Mesh TF's defaults
        return MeshAdafactor(groups, lr=cfg.lr, start_step=cfg.adafactor_start_step)
    from transformers.optimization import Adafactor as HFAdafactor

    # HF Trainer with adafactor=True (PyGaggle's finetune_monot5.py): scale_parameter=False, relative_step=False
    return HFAdafactor(groups, lr=cfg.lr, scale_parameter=False, relative_step=False, warmup_init=False)


def warmup_updates(cfg: Training, total: int) -> int:
    return int(round(cfg.warmup * total))


def lr_factor(step: int, total: int, warmup: int, decay: str) -> float:
    """Multiplier of the peak LR for update ``step`` (0-based) of ``total``: a linear ramp over the first
    ``warmup`` updates (1/(w+1), 2/(w+1), …; HF and BERT start at 0, which wastes an update of a short run), the
    peak at the first update after it, then linear decay towards 0 after the last update (HF's
    get_linear_schedule_with_warmup) or constant.

    ``bert``: BERT's ``create_optimizer``, as dl4marco-bert ran it (nyu-dl/dl4marco-bert @ a75f26a optimization.py
    lines 31-54), with ``step`` its global step before the update: step / warmup while step < warmup (from 0: the
    first update moves nothing but the moments), else polynomial_decay with power 1 over all ``total`` steps,
    1 - step / total, so the ramp ends at 1 - warmup / total, not at the peak."""
    if decay == "bert":
        return step / warmup if step < warmup else max(0.0, 1.0 - step / max(1, total))
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if decay == "constant":
        return 1.0
    return max(0.0, (total - step) / max(1, total - warmup))


# -- which pairs each update sees ---------------------------------------------------------------------------
def _passes(n: int, rng: np.random.Generator, lengths: np.ndarray | None,
            batch_size: int) -> Iterator[list[np.ndarray]]:
    """Endless passes over n pairs, each cut into batches in a new seeded order. With ``lengths``, each chunk of
    50 batches is sorted by length and cut into batches of similar lengths (HF's get_length_grouped_indices,
    megabatch 50), whose order within the chunk is then shuffled, so that the seed still orders the run."""
    step = 50 * batch_size if lengths is not None else n
    while True:
        order = rng.permutation(n)
        batches = []
        for c in range(0, n, step):
            chunk = order[c : c + step]
            if lengths is not None:
                chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
            cut = [chunk[s : s + batch_size] for s in range(0, len(chunk), batch_size)]
            batches += [cut[i] for i in rng.permutation(len(cut))] if lengths is not None else cut
        yield batches


def micro_batches(n: int, cfg: Training, seed: int, lengths: np.ndarray | None = None) -> list[np.ndarray]:
    """Pair indices of every micro-batch of the run, in order.

    ``epochs``: each pass is cut into batches on its own (the last one may be smaller), so each pair is seen once
    per epoch; the first pass is the order one epoch always had. ``updates``: a stream of passes, reshuffled each
    time, cut into full batches until ``updates * grad_accum`` micro-batches (Capreolus' endless triplet sampler,
    sampler/__init__.py ``generate_samples``, reshuffles the training queries on every pass; with length grouping
    a batch that spans two passes mixes lengths).
    """
    rng = np.random.default_rng(seed)
    passes = _passes(n, rng, lengths if cfg.group_by_length else None, cfg.batch_size)
    if cfg.updates is None:
        return [b for _ in range(cfg.epochs) for b in next(passes)]
    need = cfg.updates * cfg.grad_accum * cfg.batch_size
    stream = np.concatenate([np.concatenate(next(passes)) for _ in range(math.ceil(need / n))])[:need]
    return [stream[s : s + cfg.batch_size] for s in range(0, need, cfg.batch_size)]


# -- the loop -----------------------------------------------------------------------------------------------
class TrainResult(Mapping):
    """What :func:`train` returns: the figures of the training manifest (a read-only mapping, so
    ``{**result}`` and ``result["updates"]`` work) and ``history``, one row per update (step, loss, lr, pairs)."""

    def __init__(self, figures: dict, history: pd.DataFrame):
        self.figures, self.history = figures, history

    def __getitem__(self, key):
        return self.figures[key]

    def __iter__(self):
        return iter(self.figures)

    def __len__(self) -> int:
        return len(self.figures)

    def __repr__(self) -> str:
        return f"TrainResult({self.figures!r}, history={len(self.history)} updates)"


def pairs_of(instances: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Aligned positive and negative rows of each training query (pair id order)."""
    pos = instances[instances.label == 1].sort_values("pair", kind="mergesort").reset_index(drop=True)
    neg = instances[instances.label == 0].sort_values("pair", kind="mergesort").reset_index(drop=True)
    if len(pos) != len(neg) or not (pos.pair.values == neg.pair.values).all():
        raise TrainingError("the training set does not hold exactly one positive and one negative per query")
    if len(pos) == 0:
        raise TrainingError("the training set is empty")
    return pos, neg


SYNC_EVERY = 50  # updates between two reads of the losses from the device


class PairBatches:
    """The micro-batches of a run as the model's input tensors, gathered from token ids (documents encoded once,
    queries once), so that a DataLoader's workers collate them off the training thread: a map-style dataset (its
    length and items), as a DataLoader takes one, declared without importing torch.

    Item ``i`` is micro-batch ``i``: ``{"pos": feats, "neg": feats}`` for a pairwise model, ``{"feats": feats,
    "labels": labels}`` with each query's positive and negative side by side for a pointwise one.
    """

    def __init__(self, collate, queries: Any, docs: Any, query: np.ndarray, pos: np.ndarray, neg: np.ndarray,
                 batches: list[np.ndarray], pointwise: bool):
        self.collate, self.queries, self.docs, self.pointwise = collate, queries, docs, pointwise
        self.query, self.pos, self.neg, self.batches = query, pos, neg, batches

    @classmethod
    def of(cls, model: nn.Module, pos: pd.DataFrame, neg: pd.DataFrame, batches: list[np.ndarray],
           docs: Any | None = None) -> "PairBatches":
        """The batches of aligned positive and negative rows; ``docs``: the stored tokens of the set's documents
        (keyed by docno), else the documents are encoded here."""
        import pandas as pd

        if docs is None:
            both = pd.concat([pos, neg]).drop_duplicates("docno").sort_values("docno", kind="mergesort")
            docs = model.encode_docs(both["text"].tolist())
            docs.keys = both["docno"].tolist()
        model.check_tokens(docs)  # tokens stored by another encoder are refused
        rows = docs.index()
        missing = sorted((set(pos.docno) | set(neg.docno)) - rows.keys())
        if missing:
            raise TrainingError(f"{len(missing)} training documents have no stored tokens (e.g. {missing[0]!r}); "
                                "the tokens artifact does not belong to this training set")
        texts, query = np.unique(pos["query"].to_numpy(dtype=object), return_inverse=True)
        queries = model.encode_queries(texts.tolist(), docs)
        return cls(model.collator(), queries, docs, query.astype(np.int64),
                   pos["docno"].map(rows).to_numpy(np.int64), neg["docno"].map(rows).to_numpy(np.int64), batches,
                   model.objective != "pairwise")

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> dict:
        import torch

        idx = self.batches[i]
        if self.pointwise:  # positive, negative, positive, negative, … (each query's pair adjacent)
            docs = np.column_stack([self.pos[idx], self.neg[idx]]).ravel()
            feats = self.collate(self.queries.take(np.repeat(self.query[idx], 2)), self.docs.take(docs))
            return {"feats": feats, "labels": torch.from_numpy(np.tile(np.array([1, 0], dtype=np.int64), len(idx)))}
        q = self.queries.take(self.query[idx])
        return {"pos": self.collate(q, self.docs.take(self.pos[idx])),
                "neg": self.collate(q, self.docs.take(self.neg[idx]))}

    def loader(self, workers: int = 0, pin_memory: bool = False, start: int = 0) -> torch.utils.data.DataLoader:
        """Micro-batches in order from micro-batch ``start`` (a resumed run); ``workers`` processes collate ahead (4
        batches each), into pinned memory on CUDA so that copies to the device overlap the step. The batches do not
        depend on the workers, and the loader draws its workers' seed from a generator of its own, seeded alike in
        every loader: the global random state (dropout) stays the seed's, and a resumed run needs no loader state."""
        import torch

        data = self if not start else torch.utils.data.Subset(self, range(start, len(self)))
        return torch.utils.data.DataLoader(data, batch_size=None, shuffle=False, num_workers=workers,
                                           pin_memory=pin_memory, prefetch_factor=4 if workers else None,
                                           generator=torch.Generator().manual_seed(0))


def loader_workers(setting, device: str) -> int:
    """``loader_workers``: ``auto`` = none on a CPU (the cores train), on CUDA up to 4 (one core stays with the
    training thread), counted among the job's CPUs (:func:`leakexp.runner.jobs.allocated_cpus`: SLURM's
    allocation or the affinity mask, not the node's every core)."""
    if setting != "auto":
        return int(setting)
    return min(4, max(0, allocated_cpus() - 1)) if str(device).startswith("cuda") else 0


# -- resumable state ----------------------------------------------------------------------------------------
RESUME_EVERY_S = 300.0  # seconds between two saved states of a training run (config: resume_every_s)
RESUME_FORMAT = 1  # the layout of a saved training state; a state of another layout is never read
RESUME_SIGNALS = ("SIGUSR2", "SIGTERM")  # SLURM's warning signal (submitit asks for USR2) and a polite kill


class ResumeState:
    """Where one training run keeps a resumable state (``<folder>/train-state.pt``), and the signals that ask it to
    keep one now.

    The state is everything the rest of the run depends on, taken between two updates: the weights, the optimiser's
    and the schedule's state, the random states (Python, NumPy, torch on the CPU and CUDA), the update reached (the
    micro-batches seen follow from it: the seed orders them), the pairs seen and the history so far. A run that
    finds a state of its own ``identity`` (the artifact's key and the stage's version, :func:`_train`) continues
    from it and ends with the same weights and history, byte for byte, as one that never stopped; a state of
    another identity or layout, or of another run shape, is ignored (and overwritten by the next save). Each save
    replaces the file atomically, so a kill at any moment leaves the previous state or the new one.

    A state is saved every ``every_s`` seconds (0: never on a timer) and at the first update boundary after the
    process receives SIGUSR2 or SIGTERM (:meth:`watching`); then the signal's previous disposition acts.
    """

    FILE = "train-state.pt"

    def __init__(self, folder: str | os.PathLike, identity: str, every_s: float = 300.0):
        self.folder, self.identity, self.every_s = Path(folder), str(identity), float(every_s)
        self.pending: list[int] = []  # signals received, acted on at the next update boundary
        self.save_seconds: list[float] = []  # how long each save took (figures, benchmarks)
        self._previous: dict[int, object] = {}
        self._pid = os.getpid()
        self._last = time.monotonic()

    @property
    def path(self) -> Path:
        return self.folder / self.FILE

    def load(self) -> dict | None:
        """The saved state of this run, or None (none saved, unreadable, or another run's: each said in the log)."""
        import torch

        if not self.path.exists():
            return None
        try:  # tensors and plain values only: nothing in a state runs code when read
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a damaged file: training starts over and the next save replaces it
            log.warning("ignoring the unreadable training state %s (%s: %s); training starts over", self.path,
                        type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
            return None
        if not isinstance(state, dict) or state.get("format") != RESUME_FORMAT \
                or state.get("identity") != self.identity:
            found = state.get("identity") if isinstance(state, dict) else None
            log.warning("ignoring the training state %s: it is of another run (%s, not %s); training starts over",
                        self.path, found, self.identity)
            return None
        return state

    def save(self, state: dict) -> None:
        """Write ``state`` (plus this run's identity) in place of the previous one, atomically."""
        import torch

        start = time.perf_counter()
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{self.FILE}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                torch.save({"format": RESUME_FORMAT, "identity": self.identity, **state}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._last = time.monotonic()
        self.save_seconds.append(time.perf_counter() - start)

    def due(self) -> bool:
        """A signal asked for a state, or ``every_s`` passed since the last save (or the start)."""
        return bool(self.pending) or (self.every_s > 0 and time.monotonic() - self._last >= self.every_s)

    def restart_clock(self) -> None:
        self._last = time.monotonic()

    # -- signals --------------------------------------------------------------------------------------------
    @contextmanager
    def watching(self):
        """While training: SIGUSR2 and SIGTERM only note themselves (:attr:`pending`); the loop saves a state at
        the next update boundary and then lets the handler that was installed before act (:meth:`act_on_signals`).

        Chained, not replaced: under submitit (the SLURM launcher) that handler requeues the job and exits on USR2,
        and logs and ignores SIGTERM, so a preempted or timed-out job leaves a state behind and its requeued run
        resumes; with the default disposition the process then ends by the signal, as it would have at once.
        Only the main thread can install handlers: elsewhere nothing is watched (the timer still saves). Loader
        workers forked meanwhile leave these signals to the training process, which stops them. A signal still
        pending when training stops on an error is delivered to the handler before when the previous handlers are
        back in place."""
        installed: dict[int, object] = {}
        if threading.current_thread() is threading.main_thread():
            for name in RESUME_SIGNALS:
                signum = getattr(signal, name, None)
                if signum is not None:
                    installed[signum] = signal.signal(signum, self._on_signal)
        self._previous = installed
        try:
            yield self
        finally:
            pending, self.pending = list(dict.fromkeys(self.pending)), []
            for signum, previous in installed.items():
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
            for signum in pending:  # training stopped before a boundary acted on it
                signal.raise_signal(signum)

    def _on_signal(self, signum: int, frame) -> None:
        if os.getpid() != self._pid:  # a loader worker (forked with this handler): the training process decides
            return
        log.warning("%s received: a resumable training state is saved after this update",
                    signal.Signals(signum).name)
        self.pending.append(signum)

    def act_on_signals(self) -> None:
        """After the state is saved: each pending signal goes to the handler installed before :meth:`watching`
        (a Python handler is called; the default disposition ends the process by the signal; ignored: nothing)."""
        pending, self.pending = list(dict.fromkeys(self.pending)), []
        for signum in pending:
            previous = self._previous.get(signum, signal.SIG_DFL)
            if callable(previous):
                previous(signum, None)
            elif previous != signal.SIG_IGN:  # SIG_DFL, or a handler not installed from Python
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)
                signal.signal(signum, self._on_signal)  # the default did not end the process (e.g. SIGCHLD-like)


def _rng_states(device: str) -> dict:
    import torch

    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    states = {"python": random.getstate(), "numpy": (kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)),
              "torch": torch.get_rng_state()}
    if str(device).startswith("cuda"):
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: dict) -> None:
    import torch

    random.setstate(states["python"])
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(states["torch"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])


def trained_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """What training can change in ``model``: its state without the frozen parameters (e.g. word vectors shared by
    every model built from them: a Capreolus model's state is kB, not the 35 MB of its embedding matrix)."""
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    return {k: v for k, v in model.state_dict().items() if k not in frozen}


def _fits(state: dict, model: nn.Module, total: int, micro: int) -> str:
    """Why a saved state cannot continue this run ('' when it can): another run shape or other parameters."""
    if state.get("total") != total or state.get("micro_batches") != micro:
        return (f"it is of a run of {state.get('total')} updates over {state.get('micro_batches')} micro-batches, "
                f"this one has {total} over {micro}")
    mine = {k: tuple(v.shape) for k, v in trained_state(model).items()}
    theirs = {k: tuple(v.shape) for k, v in (state.get("model") or {}).items()}
    return "" if mine == theirs else "its weights are of another model"


def train(model: nn.Module, instances: pd.DataFrame, *, seed: int, cfg: Training, device: str = "cpu",
          progress: bool | None = True, sync_every: int = SYNC_EVERY, docs: Any | None = None,
          workers: int = 0, resume: ResumeState | None = None) -> TrainResult:
    """Train ``model`` in place within ``cfg``'s budget; returns the manifest's figures and the history.

    ``resume``: continue from its saved state if it holds one of this run, save one every few minutes and when
    SIGUSR2 or SIGTERM arrives (:class:`ResumeState`); the weights and the history are those of a run that never
    stopped.

    Batches are gathered from the documents' token ids (``docs``, the stored tokens of the set; else encoded
    here) and collated by ``workers`` DataLoader processes (0: in this thread); none of this changes a number.
    The losses stay on the device and are read together every ``sync_every`` updates and at the end, so an update
    never waits for the host; a non-finite loss stops training at that read, naming the update it appeared in.

    It changes no process-wide switch (precision is set once by :func:`configure_precision`). A model that
    reads idf needs ``model.use_idf(table)`` of the training collection before this call.
    """
    import pandas as pd

    import torch

    pos, neg = pairs_of(instances)
    lengths = (pos["query"].str.len() + np.maximum(pos["text"].str.len().values, neg["text"].str.len().values)).values
    batches = micro_batches(len(pos), cfg, seed, lengths)
    data = PairBatches.of(model, pos, neg, batches, docs)
    total = math.ceil(len(batches) / cfg.grad_accum)
    warmup = warmup_updates(cfg, total)
    if cfg.z_loss and "z_loss" not in inspect.signature(model.pointwise_loss).parameters:
        raise TrainingError(f"{model.name}: z_loss={cfg.z_loss} is Mesh TF's term on a softmax over a vocabulary "
                            "(monoT5); set z_loss: 0")
    model.to(device).train()
    opt = make_optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total, warmup, cfg.decay))
    params = [p for p in model.parameters() if p.requires_grad]
    amp = cfg.bf16 and device.startswith("cuda")
    history, pending, pairs_seen, start, done, before = [], [], 0, time.time(), 0, 0.0
    state = resume.load() if resume is not None else None
    if state is not None and (why := _fits(state, model, total, len(batches))):
        log.warning("ignoring the training state %s: %s; training starts over", resume.path, why)
        state = None
    if state is not None:
        model.load_state_dict(state["model"], strict=False)  # the frozen parameters are the model's own
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        done, pairs_seen, before = int(state["step"]), int(state["pairs_seen"]), float(state["seconds"])
        history = [tuple(row) for row in state["history"]]
        log.info("%s: resuming at update %d of %d from %s", model.name, done, total, resume.path)
    bar = tqdm(total=total, initial=done, desc=f"train {model.name}", unit="update", disable=not progress)

    def read_losses() -> None:  # one device sync for the pending updates
        values = torch.stack([loss for _, loss, _, _ in pending]).tolist()
        for (step, _, lr, pairs), value in zip(pending, values):
            if not math.isfinite(value):
                bar.close()
                raise TrainingError(f"{model.name}: loss became {value} at update {step}; lower the learning rate "
                                    "or check the training set")
            history.append((step, value, lr, pairs))
        bar.update(len(pending))
        bar.set_postfix(loss=f"{history[-1][1]:.4f}", lr=f"{history[-1][2]:.2e}")
        pending.clear()

    def keep_state(step: int) -> None:  # between two updates: nothing half-done, the gradients zeroed
        if resume is None or not resume.due():
            return
        if pending:
            read_losses()
        resume.save({"step": step, "total": total, "micro_batches": len(batches), "pairs_seen": pairs_seen,
                     "seconds": before + time.time() - start, "history": history, "model": trained_state(model),
                     "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "rng": _rng_states(device)})
        resume.act_on_signals()

    stream = iter(data.loader(workers, pin_memory=device.startswith("cuda"), start=done * cfg.grad_accum))
    opt.zero_grad(set_to_none=True)
    if state is not None:  # last: nothing above draws from the global random state of the run it continues
        _set_rng_states(state["rng"])
        state = None
    with resume.watching() if resume is not None else nullcontext():
        if resume is not None:
            resume.restart_clock()
        if resume is not None and resume.pending:  # a signal that came while the run was being set up
            keep_state(done)
        for step in range(done + 1, total + 1):
            lr = opt.param_groups[0]["lr"]
            group = batches[(step - 1) * cfg.grad_accum : step * cfg.grad_accum]
            losses = []
            for idx in group:
                loss = batch_loss(model, next(stream), device, amp, cfg.z_loss)
                (loss / len(group)).backward()
                losses.append(loss.detach().float())
                pairs_seen += len(idx)
            pending.append((step, torch.stack(losses).mean(), lr, pairs_seen))
            if cfg.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            if len(pending) >= sync_every or step == total:
                read_losses()
            if step < total:
                keep_state(step)
        if resume is not None and resume.pending:  # a signal during the last update: its state ends the run
            keep_state(total)
    bar.close()
    seconds = before + time.time() - start
    hist = pd.DataFrame(history, columns=["step", "loss", "lr", "pairs"])
    tail = hist.loss.iloc[-max(1, len(hist) // 10):]
    figures = {
        "instances": int(2 * pairs_seen), "updates": total, "steps": total, "warmup_updates": warmup,
        "epochs": round(pairs_seen / len(pos), 4), "training_pairs": int(len(pos)),
        "first_loss": round(float(hist.loss.iloc[0]), 6), "final_loss": round(float(tail.mean()), 6),
        "seconds": round(seconds, 3), "instances_per_s": round(2 * pairs_seen / max(seconds, 1e-9), 1),
        "device": device,
    }
    return TrainResult(figures, hist)


def batch_loss(model: nn.Module, batch: dict, device: str, amp: bool, z_loss: float = 0.0) -> torch.Tensor:
    """The loss of one micro-batch of :class:`PairBatches` (``amp``: bf16 autocast, on CUDA only; ``z_loss``: Mesh
    TF's term, monoT5 only); copies to the device do not block (the batch is in pinned memory on CUDA). A batch
    without padding goes without its mask (:func:`host_mask`), unless the model computes as before that
    (``compute.legacy``)."""
    import torch

    legacy = getattr(getattr(model, "compute", None), "legacy", False)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp and str(device).startswith("cuda")):
        if "pos" in batch:
            return model.pair_loss(to_device(batch["pos"], device, non_blocking=True),
                                   to_device(batch["neg"], device, non_blocking=True))
        extra = {"z_loss": z_loss} if z_loss else {}
        feats = batch["feats"] if legacy else host_mask(batch["feats"])
        return model.pointwise_loss(to_device(feats, device, non_blocking=True),
                                    batch["labels"].to(device, non_blocking=True), **extra)


# -- history files ------------------------------------------------------------------------------------------
def write_history(history: pd.DataFrame, path: str | Path) -> Path:
    """The per-update history as CSV (step, loss, lr, pairs), written atomically."""
    return atomic_write_text(Path(path), history.to_csv(index=False, float_format="%.8g"))


def read_history(path: str | Path) -> pd.DataFrame:
    import pandas as pd

    return pd.read_csv(path)


def host_mask(feats: dict) -> dict:
    """``feats`` without its ``attention_mask`` when the batch has no padding, decided on the host where the batch is
    collated (a device would have to be asked, and wait): a model then attends without a mask (T5's position bias
    stays (1, H, L, L), BERT gets SDPA's fused kernels) and computes what it computes with an all-ones mask. A padded
    batch keeps its mask."""
    import torch

    mask = feats.get("attention_mask")
    if isinstance(mask, torch.Tensor) and mask.device.type == "cpu" and bool(mask.all()):
        return {k: v for k, v in feats.items() if k != "attention_mask"}
    return feats


def pin_batch(feats: dict) -> dict:
    """The CPU tensors of ``feats`` in pinned memory, so that a non-blocking copy to CUDA overlaps compute."""
    import torch

    return {k: v.pin_memory() if isinstance(v, torch.Tensor) and v.device.type == "cpu" else v
            for k, v in feats.items()}


def to_device(feats: dict, device: str, non_blocking: bool = False) -> dict:
    """Tensors of ``feats`` on ``device`` (``non_blocking``: from pinned memory, the copy overlaps compute)."""
    import torch

    return {k: v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v
            for k, v in feats.items()}


# -- the settings a training run reads ---------------------------------------------------------------------------
class TrainBudget(Section):
    """``train``: the budget of every training run (one epoch in the paper, or a fixed number of updates)."""

    epochs: PositiveInt
    updates: PositiveInt | None


@section("precision")
class PrecisionSettings(Section):
    """``precision``: float32 matmul precision, bf16 autocast and torch.compile on CUDA. ``bf16`` is the one switch
    (conf/config.yaml sets ``train_bf16`` and ``rerank_bf16`` to it): ``precision.bf16=false`` computes in fp32
    throughout, as the references did; the two can still be set apart. ``compile`` likewise for
    ``train_compile`` and ``rerank_compile``."""

    matmul: Literal["highest", "high", "medium"]
    bf16: bool = True
    train_bf16: bool
    rerank_bf16: bool
    # torch.compile on CUDA of the models with a fast path (monoT5, monoBERT: leakexp.models.compute); ``compile`` is
    # the one switch conf/config.yaml sets both to
    compile: bool = False
    train_compile: bool
    rerank_compile: bool


class ModelTraining(Section):
    """A model's ``train:`` block (``models.<name>.train``): optimiser, schedule, batch shapes; each model's file in
    conf/model/ sets its reference's values. A value a file leaves out is Capreolus' PytorchTrainer's
    (trainer/pytorch.py at v0.2.6), but the schedule (linear decay)."""

    batch_size: PositiveInt = 32  # pairs per micro-batch (each pair: the query's positive and negative)
    lr: PositiveFloat = 1e-3  # peak learning rate
    optimizer: Optimizer = "adam"
    adam_eps: PositiveFloat = 1e-8  # torch's default; dl4marco-bert uses 1e-6
    weight_decay: NonNegativeFloat = 0.0  # never applied to biases and normalisation weights
    warmup: Annotated[float, Field(ge=0, lt=1)] = 0.0  # fraction of the run's updates with a linear warmup
    decay: Literal["linear", "constant", "bert"] = "linear"  # linear to 0 after the last update | constant | BERT's
    grad_accum: PositiveInt = 1  # micro-batches per update
    max_grad_norm: PositiveFloat | None = None  # clip the global gradient norm; None = no clipping
    group_by_length: bool = False  # batches of similar lengths (less padding), order still seeded
    score_batch_size: PositiveInt = 64  # pairs per scoring batch (inference: no part of training)
    updates: PositiveInt | None = None  # this model's own budget (replaces the run-wide train:); null: train:'s
    # adafactor_mesh only: the global step the decay rate 1 - (t+1)^-0.8 counts from; 0 = a fresh optimiser (t5-base
    # carries no optimiser state); 999900 = the step of the authors' pre-trained checkpoint (leakexp.lib.adafactor)
    adafactor_start_step: NonNegativeInt = 0
    # Mesh TF's z-loss on monoT5's vocabulary softmax (leakexp.models.monot5.MonoT5.pointwise_loss); the recipes
    # mesh_tf* set 1e-4, Mesh TF's default (mesh_tensorflow/transformer/transformer.py line 712); 0: none
    z_loss: NonNegativeFloat = 0.0

    @model_validator(mode="after")
    def _mesh_adafactor_has_no_weight_decay(self):
        if self.optimizer == "adafactor_mesh" and self.weight_decay:
            raise ValueError(f"weight_decay={self.weight_decay}: Mesh TF's Adafactor (adafactor_mesh) has no weight "
                             "decay; set weight_decay: 0")
        return self


class Training(ModelTraining):
    """One training run: a model's ``train:`` block within the run-wide budget (the ``train`` section: passes, or a
    number of updates), and whether it autocasts to bf16 on CUDA; what :func:`train` reads. Built by hand (tests,
    benchmarks) or :meth:`of` the settings."""

    epochs: PositiveInt = 1  # passes over the training set (the paper: one), each in a new order
    bf16: bool = True  # bf16 autocast on CUDA (ignored on a CPU)

    def __init__(self, **values):
        try:
            super().__init__(**values)
        except ValidationError as exc:  # one line naming the setting, as a configuration error does
            e = exc.errors()[0]
            where = ".".join(str(p) for p in e["loc"]) or "train config"
            got = "" if e["type"] == "missing" or not e["loc"] else f" (got {e.get('input')!r})"
            raise ValueError(f"train config: {where}: {e['msg'].lower().removeprefix('value error, ')}{got}") \
                from None

    @classmethod
    def of(cls, model_train: Mapping | None, budget: Mapping | None = None, **overrides) -> "Training":
        """The run of one model: the run-wide budget (``train:`` of the config: epochs / updates), then the model's
        ``train:`` block (its ``updates: null`` keeps the run-wide budget), then ``overrides`` (e.g. ``bf16=...``).
        An unknown key is an error that names it (a typo would otherwise train with a default silently)."""
        known, merged = set(cls.model_fields), {}
        for where, block in (("train", budget), ("model.train", model_train), ("overrides", overrides)):
            for k, v in dict(block or {}).items():
                if where == "model.train" and k == "updates" and v is None:
                    continue
                if k not in known:
                    raise ValueError(f"{where}.{k} is not a training option; known: {', '.join(sorted(known))}")
                merged[k] = v
        return cls(**merged)

    @classmethod
    def of_model(cls, name: str, **overrides) -> "Training":
        """The model file's training settings (``conf/model/<name>.yaml``: batch size, accumulation, optimiser,
        schedule, clipping) with ``overrides``; what the GPU tests and benchmarks train the paper's shapes with."""
        return cls.of(model_config(name)["train"], None, **overrides)
