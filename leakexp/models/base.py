"""What every re-ranker offers the trainer and the re-ranking stage."""

from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path
from typing import Any, Callable, Literal, NamedTuple, Sequence, TYPE_CHECKING

import numpy as np

from leakexp.lib.trainer import ModelTraining, host_mask, pin_batch, to_device
from leakexp.models.compute import Compute, CudaSettings, compiled
from leakexp.models.tokens import Tokens, check_source
from leakexp.runner.schema import Name, Section

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd
    import torch
    from torch import nn


class ModelInput(NamedTuple):
    """An artifact a model reads in place of one of its settings: the stage that makes it, the setting it replaces
    (monoT5's embedded checkpoint: the ``t5vocab`` stage's tokenizer and config)."""

    stage: str
    setting: str


def with_artifacts(cls: type["Reranker"], settings: Any, params: dict, opened: Callable[[str], Any]) -> dict:
    """``params`` (the model's settings) with each setting an artifact replaces set to that artifact's path
    (``opened(input name)``: the artifact as the stage received it)."""
    return {**params, **{a.setting: str(opened(name)) for name, a in cls.artifacts(settings).items()}}


class _Declared:
    """:class:`Module`'s base until a module is built (then torch's ``nn.Module``)."""


class Module(_Declared):
    """A torch module (``nn.Module``) declared without importing torch: the first module built makes torch's
    ``nn.Module`` the base of this class (and so of every model), so a model's module declares, registers and
    validates its settings without torch, and the commands that compute nothing (``--help``, ``status``, ``plan``,
    ``stages``, ``tables``) start fast. A built model is a torch module like any other (its class, parameters,
    state-dict keys, copies and pickles); ``issubclass(cls, nn.Module)`` holds once one was built."""

    def __new__(cls, *args, **kwargs):
        if Module.__bases__ == (_Declared,):
            from torch import nn

            Module.__bases__ = (nn.Module,)
        return super().__new__(cls)


def inference_mode(fn):
    """``torch.inference_mode()`` as a decorator that imports torch when the method runs, not when it is declared."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        import torch

        with torch.inference_mode():
            return fn(*args, **kwargs)

    return run


class Reranker(Module):
    """A scoring model for (query, document) pairs, a torch module (:class:`Module`).

    Subclasses implement :meth:`document_tokens` and :meth:`encode_queries` (texts -> token ids, once per text),
    :meth:`collator` (token ids of a batch -> tensors) and :meth:`forward` (tensors -> one score per pair), and say
    how they train: ``pairwise`` models use a hinge loss on
    (s+, s-), ``pointwise`` ones a cross-entropy on the label of each instance.
    """

    name: str = "reranker"
    LABEL: str = "Reranker"  # how tables and captions name the model (the one table: leakexp.models.MODEL_LABEL)
    Settings: type["ModelSettings"]  # the schema of its settings, models.<name> (validated before any work)
    # what its checkpoint setting may name instead of Hugging Face weights: the embedded defaults (docs/design.md)
    CHECKPOINT_ALTERNATIVE: str = "bundled"
    objective: str = "pairwise"  # or "pointwise"
    margin: float = 1.0
    # how the model computes (leakexp.models.compute): what the stages set from precision.*_compile and
    # models.<name>.cuda on CUDA for a model with FAST_PATH (monoT5, monoBERT); the others keep the default
    FAST_PATH: bool = False
    compute: Compute = Compute()

    @classmethod
    def reads_idf(cls, params: dict) -> bool:
        """Whether a model built with ``params`` reads the idf of the collection it ranks (known before it is
        built, so the pipeline can make the collection's df table part of the artifact's config)."""
        return False

    @classmethod
    def artifacts(cls, settings: Any) -> dict[str, "ModelInput"]:
        """What a model with ``settings`` (its ``models.<name>`` section) takes from another stage's artifact instead
        of from a setting: input name -> :class:`ModelInput`. The stages that build, train or encode with the model
        ask for those artifacts and put each artifact's path in place of its setting."""
        return {}

    @property
    def needs_idf(self) -> bool:
        """True when scoring reads the idf of the collection (then call ``use_idf(table)`` first)."""
        return type(self).reads_idf(getattr(self, "hparams", {}))

    # -- what the model reads of a text, computed once (leakexp.models.tokens) ---------------------------
    # the model settings that :meth:`document_tokens` reads (the tokens stage declares them)
    ENCODING: tuple[str, ...] = ()

    @classmethod
    def document_tokens(cls, settings: dict, texts: Sequence[str], *, progress: bool = False) -> Tokens:
        """What a model built with ``settings`` reads of each document: token ids truncated to what it reads, the
        full length, and for word models the unknown words of negative ids. Needs only the settings in ``ENCODING``
        (never the model's weights), so every cell of a corpus or a training set shares one stored copy."""
        raise NotImplementedError

    @classmethod
    def encoding_id(cls, settings: dict) -> str:
        """What identifies :meth:`document_tokens`' output beyond the settings' values (e.g. the content of the
        word-vector file); stored with the tokens and compared before they are used."""
        return ""

    def check_tokens(self, tokens: Tokens) -> None:
        """Refuse stored tokens made by another encoder than this model's (:func:`~leakexp.models.tokens.check_source`)."""
        check_source(self, tokens)

    def encode_docs(self, texts: Sequence[str]) -> Tokens:
        return type(self).document_tokens(self.hparams, texts)

    def encode_queries(self, texts: Sequence[str], docs: Tokens) -> Tokens:
        """What the model reads of each query; word models extend ``docs``' unknown words (the result's ``oov``
        holds both), and add per-query weights such as idf."""
        raise NotImplementedError

    def collator(self) -> Callable[[Tokens, Tokens], dict[str, torch.Tensor]]:
        """A picklable function (no parameters inside, so DataLoader workers can run it) from aligned query and
        document rows of one batch to the CPU tensors :meth:`forward` takes."""
        raise NotImplementedError

    def featurize(self, queries: list[str], docs: list[str]) -> dict[str, torch.Tensor]:
        """Texts -> CPU tensors of one batch (encode, then collate). It never reads the model's parameters, which
        may live on another device; lookups happen in :meth:`forward`."""
        d = self.encode_docs(docs)
        return self.collator()(self.encode_queries(queries, d), d)

    def pair_loss(self, pos: dict, neg: dict) -> torch.Tensor:
        """Capreolus' pairwise hinge: mean(max(0, margin - s+ + s-))."""
        import torch

        return fp32(lambda sp, sn: torch.clamp(self.margin - sp + sn, min=0).mean(), self(**pos), self(**neg))

    def pointwise_loss(self, feats: dict, labels: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def score(self, queries: list[str], docs: list[str], *, batch_size: int = 64, device: str | None = None,
              bf16: bool = True, score_dtype: str = "float32") -> list[float]:
        """Scores of aligned (query, doc) text lists (see :meth:`score_tokens`). A model that only implements
        :meth:`featurize` (no token ids) is scored from the texts, batch by batch."""
        if not self.encodes():
            return round_scores(self._score_texts(queries, docs, batch_size=batch_size, device=device, bf16=bf16),
                                score_dtype).tolist()
        d = self.encode_docs(docs)
        return self.score_tokens(self.encode_queries(queries, d), d, batch_size=batch_size, device=device,
                                 bf16=bf16, score_dtype=score_dtype).tolist()

    @classmethod
    def encodes(cls) -> bool:
        """Whether the model encodes texts to token ids (else it implements :meth:`featurize` on texts alone)."""
        return cls.document_tokens.__func__ is not Reranker.document_tokens.__func__

    def _device(self, device: str | None) -> str:
        if device is None:
            first = next(self.parameters(), None)
            device = str(first.device) if first is not None else "cpu"
        return device

    @inference_mode
    def _score_texts(self, queries: list[str], docs: list[str], *, batch_size: int, device: str | None,
                     bf16: bool) -> list[float]:
        import torch

        self.eval()
        device = self._device(device)
        order = sorted(range(len(docs)), key=lambda i: len(docs[i]))
        out = [0.0] * len(docs)
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            feats = to_device(self.featurize([queries[i] for i in idx], [docs[i] for i in idx]), device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16 and device.startswith("cuda")):
                for i, v in zip(idx, self(**feats).float().tolist()):
                    out[i] = float(v)
        return out

    @inference_mode
    def score_tokens(self, queries: Tokens, docs: Tokens, *, batch_size: int = 64, device: str | None = None,
                     bf16: bool = True, score_dtype: str = "float32") -> np.ndarray:
        """Scores (float64) of aligned query and document rows, in batches of documents of similar length.

        ``device`` defaults to where the parameters are. On CUDA, ``bf16`` runs the forward pass under bf16
        autocast (config ``precision.rerank_bf16``) unless the model scores with bf16 weights (``compute``); on a CPU
        it changes nothing. Each batch is collated on the host, where its padding mask is decided (none for a batch
        without padding), copied from pinned memory without blocking, and its scores are read from the device once,
        after the next batch is queued; a compiled model gets batches of one size (the last padded with repeated
        rows, whose scores are dropped). Scores are stored as ``score_dtype`` (:func:`round_scores`: ``float16``
        rounds them as Capreolus stores them).
        """
        import torch

        self.eval()
        device = self._device(device)
        cuda = device.startswith("cuda")
        how = self.compute
        use_bf16 = bf16 and cuda and not how.bf16_weights
        collate = self.collator()
        order = np.argsort(docs.full, kind="stable")
        out = np.zeros(len(order), dtype=np.float64)

        def read(idx: np.ndarray, scores: torch.Tensor) -> None:  # the one device-to-host read of a batch
            out[idx] = scores[: len(idx)].cpu().numpy()

        pending = None  # the previous batch's scores, read once the next batch is queued behind them
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            rows = np.concatenate([idx, np.repeat(idx[-1:], batch_size - len(idx))]) if how.compile else idx
            feats = collate(queries.take(rows), docs.take(rows))
            if not how.legacy:
                feats = pin_batch(host_mask(feats)) if cuda else host_mask(feats)
            feats = to_device(feats, device, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
                scores = self.scores(feats)
            if pending is not None:
                read(*pending)
            pending = (idx, scores)
        if pending is not None:
            read(*pending)
        return round_scores(out, score_dtype)

    def scores(self, feats: dict) -> torch.Tensor:
        """(B,) fp32 scores of one batch on the device (what :meth:`score_tokens` reads)."""
        return self(**feats).float()

    # -- checkpoints ----------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        raise NotImplementedError

    def save(self, out: Path) -> None:
        import torch

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        torch.save({k: v.detach().cpu() for k, v in self.state_dict().items()}, out / "model.pt")
        (out / "model.json").write_text(json.dumps({"name": self.name, "config": self.config()}, indent=2) + "\n")

    def transformer(self, *, batch_size: int = 64, device: str | None = None, bf16: bool = True,
                    docs: Tokens | None = None, score_dtype: str = "float32"):
        """This model as a PyTerrier re-ranker: ``bm25 >> text >> model.transformer()``, or with the documents'
        stored tokens ``bm25 >> model.transformer(docs=tokens)``; scores stored as ``score_dtype``."""
        return RerankTransformer(self, batch_size=batch_size, device=device, bf16=bf16, docs=docs,
                                 score_dtype=score_dtype)


class HFReranker(Reranker):
    """A re-ranker around a Hugging Face model (attribute ``hf_attr``) and its tokenizer, saved as a Hugging
    Face checkpoint that transformers (and pyterrier-t5 for monoT5) load directly, plus leakexp's model.json."""

    hf_attr: str
    hparams: dict
    FAST_PATH = True

    def config(self) -> dict:
        return dict(self.hparams)

    # -- how it computes (leakexp.models.compute) ------------------------------------------------------
    def use(self, compute: Compute) -> "HFReranker":
        """Compute as ``compute`` says from now on. bf16 weights are cast here, once (:meth:`cast_for_scoring`):
        such a model scores, and is neither trained nor saved."""
        if compute.bf16_weights and not self.compute.bf16_weights:
            self.cast_for_scoring()
        self.compute = compute
        self.__dict__["_cores"] = {}
        return self

    def cast_for_scoring(self) -> None:
        """The weights in bf16, the score head in fp32 (each model says what its head is)."""
        raise NotImplementedError

    def _core(self, kind: str, fn):
        """``fn`` as the model runs it: compiled once per kind (``score``, ``loss``) when ``compute.compile``."""
        if not self.compute.compile:
            return fn
        cores = self.__dict__.setdefault("_cores", {})
        if kind not in cores:
            cores[kind] = compiled(fn, int(self.hparams.get("max_length", 512)))
        return cores[kind]

    def scores(self, feats: dict) -> torch.Tensor:
        return self._core("score", self.forward)(**feats).float()

    def save(self, out: Path) -> None:
        if self.compute.bf16_weights:
            raise RuntimeError(f"{self.name}: a model cast to bf16 for scoring is not saved; load its checkpoint "
                               "again")
        out = Path(out)
        getattr(self, self.hf_attr).save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        cfg = dict(self.hparams, checkpoint=".")  # this directory (load() reads it from where it lies)
        (out / "model.json").write_text(json.dumps({"name": self.name, "config": cfg}, indent=2) + "\n")

    @classmethod
    def load(cls, path: Path):
        cfg = json.loads((Path(path) / "model.json").read_text())["config"]
        return cls(**dict(cfg, checkpoint=str(path)))


def padding_mask_4d(attention_mask: torch.Tensor | None, config) -> torch.Tensor | None:
    """A (B, L) 0/1 padding mask as the (B, 1, 1, L) mask transformers would build from it, built here where it lives.

    The host decides whether a batch has padding (:func:`leakexp.lib.trainer.host_mask`: no mask without padding, so
    T5's position bias stays (1, H, L, L) and BERT reaches the fused SDPA kernels); a mask that arrives is a padded
    batch's. On CUDA, transformers (>= 5) would ask the device whether a 2D mask has any padding (``padding_mask.all()``
    in ``masking_utils._ignore_bidirectional_mask_sdpa``), which copies a result to the host and stalls every forward
    pass; a 4D mask is passed through as is. Only for CUDA tensors: on a CPU the check costs nothing and transformers'
    own path keeps today's numbers. The form follows the attention implementation: boolean (keep = True) for SDPA,
    additive (0 or the dtype's minimum) for eager attention."""
    if attention_mask is None or attention_mask.device.type != "cuda" or attention_mask.dim() != 2:
        return attention_mask
    return as_4d_mask(attention_mask, config)


def as_4d_mask(attention_mask: torch.Tensor, config) -> torch.Tensor:
    """(B, L) 0/1 -> (B, 1, 1, L): boolean for SDPA, additive fp32 for eager attention (see :func:`padding_mask_4d`)."""
    import torch

    keep = attention_mask[:, None, None, :].bool()
    if getattr(config, "_attn_implementation", "sdpa") == "sdpa":
        return keep
    dtype = torch.float32
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill_(~keep, torch.finfo(dtype).min)


def autocast_off(device_type: str):
    """A context with autocast disabled on ``device_type`` (nothing to disable where autocast does not exist,
    e.g. the ``meta`` device)."""
    import torch

    # CUDA and CPU answered here: torch.compile cannot trace torch.amp.is_autocast_available before torch 2.13
    if device_type in ("cuda", "cpu") or torch.amp.is_autocast_available(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def fp32(fn, *tensors: torch.Tensor) -> torch.Tensor:
    """``fn(*tensors)`` in fp32 with autocast off (CUDA or CPU, wherever the tensors are).

    For the score heads, the log-softmax and the loss: under bf16 autocast a score keeps 8 significant bits, so
    documents of one query collapse onto the same score and the docno tie-break, not the model, orders them."""
    with autocast_off(tensors[0].device.type):
        return fn(*(t.float() for t in tensors))


def keep_fp32(module: nn.Module) -> nn.Module:
    """Make ``module`` always run in fp32 with autocast off (its parameters and state-dict keys unchanged);
    for a score head inside a Hugging Face model (e.g. ``BertForSequenceClassification.classifier``)."""
    import torch

    inner = module.forward

    def forward(*args, **kwargs):
        with autocast_off(next(module.parameters()).device.type):
            return inner(*(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args), **kwargs)

    module.forward = forward
    return module


def _pt():
    import pyterrier as pt

    return pt


class RerankTransformer:
    """PyTerrier transformer scoring (qid, query, docno, text) rows; ties broken by docno. With ``docs`` (the
    documents' :class:`Tokens`, keyed by docno) it scores (qid, query, docno) rows from those token ids, without a
    text column or any tokenising of documents."""

    def __new__(cls, model: Reranker, *, batch_size: int = 64, device: str | None = None, bf16: bool = True,
                docs: Tokens | None = None, score_dtype: str = "float32"):
        import pandas as pd

        pt = _pt()
        check_score_dtype(score_dtype)
        rows = docs.index() if docs is not None else None
        if docs is not None:
            from leakexp.models.tokens import check_source

            check_source(model, docs)

        class _Rerank(pt.Transformer):
            def __init__(self):
                self.model, self.batch_size, self.device, self.bf16 = model, batch_size, device, bf16

            def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
                pt.validate.result_frame(inp, extra_columns=["query"] if docs is not None else ["query", "text"])
                out = inp.copy()
                if docs is None:
                    scores = self.model.score(out["query"].tolist(), out["text"].tolist(), batch_size=self.batch_size,
                                              device=self.device, bf16=self.bf16, score_dtype=score_dtype)
                else:
                    missing = sorted(set(out["docno"]) - rows.keys())
                    if missing:
                        raise KeyError(f"{len(missing)} documents to re-rank have no stored tokens (e.g. {missing[0]!r})")
                    texts, which = np.unique(out["query"].to_numpy(dtype=object), return_inverse=True)
                    queries = self.model.encode_queries(texts.tolist(), docs)
                    d = docs.take([rows[n] for n in out["docno"]])
                    scores = self.model.score_tokens(queries.take(which), d, batch_size=self.batch_size,
                                                     device=self.device, bf16=self.bf16, score_dtype=score_dtype)
                out["score"] = pd.Series(scores, index=out.index, dtype="float64")
                return rank_with_docno_ties(out)

            def __repr__(self):
                return f"Rerank({self.model.name})"

        return _Rerank()


SCORE_DTYPES = ("float32", "float16")


def check_score_dtype(score_dtype: str) -> None:
    if score_dtype not in SCORE_DTYPES:
        raise ValueError(f"score_dtype={score_dtype!r} is unknown; use {' or '.join(SCORE_DTYPES)}")


def round_scores(scores, score_dtype: str = "float32") -> np.ndarray:
    """Scores (float64) as a run stores them: ``float32`` unchanged (the model's fp32 output), ``float16`` each
    score rounded to the nearest half-precision value, as Capreolus v0.2.x stores every prediction
    (capreolus-ir/capreolus@v0.2.6, capreolus/trainer/pytorch.py:320-321, ``predict``: "Need to use float16 because
    pytrec_eval's c function call crashes with higher precision floats" / ``score.astype(np.float16).item()``;
    the same two lines in every release since v0.2.0 (trainer/__init__.py:334-335 at v0.2.0-v0.2.1) and on master
    @ 789288c, trainer/pytorch.py:347-348; the TensorFlow trainer rounds alike). Half precision keeps 11
    significant bits, so nearby scores of one query become equal and the docno tie-break orders them
    (:func:`rank_with_docno_ties`); beyond ±65504 a score becomes ±inf, as in Capreolus."""
    check_score_dtype(score_dtype)
    out = np.asarray(scores, dtype=np.float64)
    if score_dtype == "float16":
        with np.errstate(over="ignore"):
            out = out.astype(np.float32).astype(np.float16).astype(np.float64)
    return out


def ties_per_query(run: pd.DataFrame) -> float:
    """Mean number of documents per query whose score equals another document's score in the same query
    (columns qid, score): the documents whose order only the docno tie-break decides."""
    if run.empty:
        return 0.0
    size = run.groupby(["qid", "score"], sort=False)["score"].transform("size")
    tied = (size > 1).groupby(run["qid"], sort=False).sum()
    return float(tied.reindex(run["qid"].unique(), fill_value=0).mean())


def rank_with_docno_ties(df: pd.DataFrame) -> pd.DataFrame:
    """Sort each query by score descending, ties by docno ascending (the paper), and set 0-based ranks."""
    df = df.sort_values(["qid", "score", "docno"], ascending=[True, False, True], kind="mergesort")
    df["rank"] = df.groupby("qid", sort=False).cumcount().astype("int64")
    return df.reset_index(drop=True)


class ModelSettings(Section):
    """What every model's settings hold (``models.<name>``): its name, its ``train:`` block, how its scores are
    stored, and its named recipes; each model extends it with its own (its module's ``Settings``)."""

    name: Name
    train: ModelTraining
    # how the model computes on CUDA (leakexp.models.compute.CudaSettings; read there only): monoT5 and monoBERT
    cuda: CudaSettings | None = None
    # the precision a score is stored in before ranking (re-ranking, memorization ranks, robustness):
    # float16 = Capreolus v0.2.x (trainer/pytorch.py:320-321 at v0.2.6, predict: score.astype(np.float16)), which
    # makes the ties the paper breaks by docno; experiment=paper sets it for knrm, pacrr and duet
    score_dtype: Literal["float32", "float16"] = "float32"
    # a named recipe (conf/model/<name>.yaml `recipes:`): its values replace the file's `train:` values, and what an
    # experiment or the command line sets in `train:` replaces the recipe's (leakexp.runner.config.apply_recipe).
    # Both keys are read while the config resolves; the stages read the `train:` block that results.
    recipe: Name | None = None
    recipes: dict[str, dict] | None = None

    def files(self, prefix: str = "model"):
        # a checkpoint is a directory or a Hugging Face name ("castorini/monot5-base-msmarco"): leakexp.lib.hub checks it
        path = getattr(self, "embeddings", None)
        if path in (None, "bundled") or not ("/" in path or path.endswith((".txt", ".npy", ".gz"))):
            return []  # the bundled vectors
        return [(f"{prefix}.embeddings", Path(path))]
