"""The ``train`` stage: a re-ranker trained on a cell's training set with a seed (``leakexp.lib.trainer``), saved
with its per-update history."""

from __future__ import annotations

from pathlib import Path

from typing import TYPE_CHECKING

from leakexp.lib import hub
from leakexp.lib.trainer import ResumeState, TrainBudget, Training, loader_workers, set_seed, train, write_history
from leakexp.models import get
from leakexp.models.base import with_artifacts
from leakexp.models.compute import Compute, micro_batch_error
from leakexp.runner.config import model_config
from leakexp.runner.stage import Ask, Config, ConfigError, ConfigErrors, Context, Stage, models_read, register_stage
from leakexp.runner.store import Store, atomic_write_json
from leakexp.stages.cell import cell_path, set_params, train_params
from leakexp.runner.schema import Settings

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


def reads_idf(config, model: str) -> bool:
    """Whether ``model``, as configured, reads the idf of the collection it ranks (then a df table is an input)."""
    return get(model).reads_idf(config.settings(f"models.{model}").dump())


# what a model's cuda: block says of scoring alone (leakexp.models.compute.CudaSettings): no part of a checkpoint's key
SCORING_ONLY = ("score_batch_size", "rerank_weights", "rerank_compile", "single_query_cross_attention")


def check_micro_batches(s: Settings) -> None:
    """Each model's ``cuda.micro_batch`` cuts an update's pairs into equal micro-batches."""
    for name in s.model_names:
        m = s.model_of(name)
        why = micro_batch_error(name, getattr(m, "cuda", None), m.train.batch_size, m.train.grad_accum)
        if why:
            raise ConfigError(why)


def on_cuda(model_train: dict, cuda: dict | None) -> dict:
    """The model's ``train:`` block as it trains on CUDA: ``cuda.micro_batch`` pairs per micro-batch, as many
    micro-batches per update as keep the update's pairs (:func:`check_micro_batches`)."""
    micro = (cuda or {}).get("micro_batch")
    if not micro:
        return model_train
    pairs = model_train["batch_size"] * model_train["grad_accum"]
    return dict(model_train, batch_size=micro, grad_accum=pairs // micro)


def training_compute(ctx: Context, cuda: dict | None) -> Compute:
    """How the cell's model trains on CUDA (``precision.train_compile``, ``models.<model>.cuda``); fp32 weights."""
    return Compute(compile=ctx.settings("precision").train_compile,
                   bias_once=bool((cuda or {}).get("position_bias_once", False)))


def checkpoint_setting(s: Settings, model: str) -> str:
    """The setting that chose ``model``'s checkpoint: the command line's ``model.checkpoint``, the experiment's
    ``model_overrides``, or the model file (where a value came from: the composed ``model`` section, before the
    model's file and ``model_overrides`` are merged into ``models.<name>``)."""
    chosen = s.values["model"]
    if chosen["name"] == model and chosen.get("checkpoint") != model_config(model).get("checkpoint"):
        return "model.checkpoint"
    if "checkpoint" in (s.run.model_overrides.get(model) or {}):
        return f"model_overrides.{model}.checkpoint"
    return f"models.{model}.checkpoint"


def require_checkpoints(s: Settings) -> None:
    """The weights the grid's and the cell's models start from load without a download (leakexp.lib.hub); every
    missing one is named at once, so that a disconnected machine's cache is filled in one trip."""
    missing = []
    for model in models_read(s.model_names):
        checkpoint = getattr(s.model_of(model), "checkpoint", None)
        if checkpoint is not None:
            try:
                hub.require(str(checkpoint), checkpoint_setting(s, model),
                            alternative=get(model).CHECKPOINT_ALTERNATIVE)
            except ConfigError as exc:
                missing.append(str(exc))
    if len(missing) == 1:
        raise ConfigError(missing[0])
    if missing:
        raise ConfigErrors(missing)


@register_stage
class Train(Stage):
    """a re-ranker trained on a training set with a seed"""

    name, version = "train", 4
    Settings = TrainBudget
    help = "train the model(s) of the given cell(s) (and whatever they lack upstream)"
    per_cell = True
    device = verify = True

    def reads(self, p: dict, cuda: bool) -> list[str]:
        # score_dtype is how re-ranking stores a score, not how a model trains: no part of a checkpoint's key
        reads = ["models.{model}", "!models.{model}.train.score_batch_size", "!models.{model}.score_dtype", "train"]
        if not cuda:  # how a model computes on CUDA: read there only
            return reads + ["!models.{model}.cuda"]
        reads += [f"!models.{{model}}.cuda.{k}" for k in SCORING_ONLY] + ["precision.matmul", "precision.train_bf16"]
        return reads + (["precision.train_compile"] if get(p["model"]).FAST_PATH else [])

    def inputs(self, p: dict, c: Config) -> dict:
        inputs = {"set": Ask.of("build", **set_params(p)),
                  "tokens": Ask.of("tokens", docs="set", model=p["model"], **set_params(p))}
        if reads_idf(c, p["model"]):  # the training documents' collection (Capreolus reads the index at hand)
            inputs["df"] = Ask.of("df", name="train")
        model = p["model"]
        return {**inputs, **{name: Ask.of(a.stage) for name, a in get(model).artifacts(c.settings(f"models.{model}")).items()}}

    def normalise(self, p: dict) -> dict:
        return train_params(p)

    def path(self, p: dict, c: Config) -> list:
        return cell_path(p)

    def compute(self, ctx: Context, tmp: Path) -> dict:
        import pandas as pd

        p, model_name, seed = ctx.params, ctx.params["model"], int(ctx.params["seed"])
        declared = ctx.settings(f"models.{model_name}")
        model = declared.dump()
        model_train = model.pop("train")
        model.pop("score_dtype", None)  # read by the stages that score (rerank, memorization, robustness)
        cuda = model.pop("cuda", None)  # how it computes on CUDA (declared there only)
        cls = get(model_name)
        params = with_artifacts(cls, declared, {k: v for k, v in model.items() if k != "name"}, ctx.input)
        device = ctx.runtime.device
        on_gpu = device.startswith("cuda")
        # read (and part of the key) on CUDA only: autocast is a CUDA setting here
        bf16 = ctx.settings("precision").train_bf16 if "precision" in ctx.config else False
        tcfg = Training.of(on_cuda(model_train, cuda) if on_gpu else model_train,
                                       ctx.settings("train").dump(), bf16=bf16)
        instances = pd.read_parquet(ctx.inputs["set"] / "instances.parquet")
        set_seed(seed)  # the seed also fixes the random initialisation
        model = cls(**params)
        if model.needs_idf:
            model.use_idf(ctx.inputs["df"])
        if on_gpu and model.FAST_PATH:
            model.use(training_compute(ctx, cuda))
        # the resumable state lives beside the artifact until it is done (the store then removes it), keyed by the
        # artifact's key and this stage's version: a state of another configuration or code is never read
        resume = ResumeState(Store.partial_path(ctx.path), identity=f"{self.name} v{self.version} {ctx.key}",
                             every_s=ctx.runtime.resume_every_s)
        result = train(model, instances, seed=seed, cfg=tcfg, device=device, docs=ctx.inputs["tokens"],
                       workers=loader_workers(ctx.runtime.loader_workers, device),
                       progress=ctx.runtime.verbose or None, resume=resume)
        model.save(tmp)
        write_history(result.history, tmp / "history.csv")
        cell = "/".join(cell_path(p))
        # timings go to the done marker (figures), not into the artifact: equal work gives equal bytes
        timing = ("seconds", "instances_per_s")
        atomic_write_json(tmp / "manifest.json", {"cell": cell, "seed": seed, **{k: v for k, v in result.items()
                                                                                 if k not in timing}})
        return {k: result[k] for k in ("instances", "updates", "final_loss", "seconds", "instances_per_s")}

    check = staticmethod(check_micro_batches)
    require = staticmethod(require_checkpoints)

    def asks(self, r, cells) -> list[Ask]:
        return [c.ask("train") for c in cells]
