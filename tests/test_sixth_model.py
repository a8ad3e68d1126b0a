"""Adding a sixth re-ranker is its class, its conf/model/<name>.yaml and a call to ``register``: no other file of
leakexp changes. Here the class lives in this test and the YAML in a copy of conf/ (``LEAKEXP_CONF``); the model
is validated by its own schema, trained, re-ranks, is evaluated, loads back from its checkpoint, is counted by
``plan`` from its file's ``plan:`` block and is named by its own label in the tables."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Literal

import pytest
import torch
from torch import nn

from leakexp.models import MODEL_LABEL, REGISTRY, load_checkpoint, register, unregister
from leakexp.models.capreolus import CapreolusReranker, CapreolusSettings

ROOT = Path(__file__).resolve().parent.parent


class Cosine(CapreolusReranker):
    """The cosine of the query's and the document's mean word vectors, scaled by one trained weight and bias."""

    name = "cosine"
    LABEL = "Cosine"

    def __init__(self, *, embeddings: str = "bundled", maxqlen: int = 4, maxdoclen: int = 800,
                 finetune: bool = False, unit_vectors: bool = False, **_):
        super().__init__(embeddings=embeddings, maxqlen=maxqlen, maxdoclen=maxdoclen, finetune=finetune,
                         unit_vectors=unit_vectors)
        self.hparams = dict(embeddings=embeddings, maxqlen=maxqlen, maxdoclen=maxdoclen, finetune=finetune,
                            unit_vectors=unit_vectors)
        self.scale = nn.Linear(1, 1)

    def forward(self, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        def mean(ids: torch.Tensor) -> torch.Tensor:  # out-of-vocabulary words (ids < 0) embed as zeros
            return self.embedding(ids.clamp(min=0)).sum(1)

        cos = torch.nn.functional.cosine_similarity(mean(q).float(), mean(d).float(), dim=-1, eps=1e-6)
        return self.scale(cos.unsqueeze(-1)).squeeze(-1)

    def config(self) -> dict:
        return dict(self.hparams)


class CosineSettings(CapreolusSettings):
    name: Literal["cosine"]
    finetune: bool


Cosine.Settings = CosineSettings

YAML = """name: cosine
embeddings: bundled
maxqlen: 4
maxdoclen: 800
finetune: false
train:
  batch_size: 16
  lr: 0.01
  optimizer: adam
  adam_eps: 1.0e-8
  weight_decay: 0.0
  warmup: 0.0
  decay: constant
  grad_accum: 1
  max_grad_norm: null
  group_by_length: false
  score_batch_size: 64
plan:
  train_instances_per_s: 1000
  rerank_docs_per_s: 5000
  job_startup_s: 5
  encode_docs_per_s: 1000
  data_pipeline_instances_per_s: 80000
"""

CELL = ["data.queries_per_source=600", "corpus=toy_core17", "memorization.enabled=false",
        "robustness.enabled=false", "model=cosine", "seed=1"]
GRID = ["grid.corpora=[toy_core17]", "grid.leakages=[none,msm]", "grid.sizes=[128]", "grid.models=[cosine]",
        "grid.seeds=[1]"]


@pytest.fixture
def sixth(tmp_path, monkeypatch):
    """A copy of conf/ with a model file for cosine beside the five, and Cosine registered; both gone afterwards."""
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "model" / "cosine.yaml").write_text(YAML)
    monkeypatch.setenv("LEAKEXP_CONF", str(conf))
    register("cosine", Cosine)
    yield conf
    unregister("cosine")


def test_an_unregistered_model_file_is_refused_by_name(tmp_path, monkeypatch):
    from leakexp.runner.registry import compose
    from leakexp.runner.config import ConfigError

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "model" / "cosine.yaml").write_text(YAML)
    monkeypatch.setenv("LEAKEXP_CONF", str(conf))
    assert "cosine" not in REGISTRY
    with pytest.raises(ConfigError, match=r"model 'cosine' has no registered class.*leakexp.models.register"):
        compose([f"store={tmp_path / 'store'}", *CELL])


def test_a_sixth_model_is_its_class_its_file_and_register(sixth, tmp_path, seeded_store):
    from leakexp.cli.plan import plan
    from leakexp.runner.registry import compose, runner
    from leakexp.grid.work import run_cell
    from leakexp.runner.config import ConfigError
    from leakexp.stages.cell import Cell, grid_cells
    from leakexp.tables.paper import write_tables

    store = seeded_store(tmp_path / "store")
    assert MODEL_LABEL["cosine"] == "Cosine"
    # its own schema checks its settings, before any work
    with pytest.raises(ConfigError, match=r"model\.maxqlen"):
        compose([f"store={store}", *CELL, "model.maxqlen=0"])
    with pytest.raises(ConfigError, match=r"model\.gradkernels"):  # KNRM's setting is not the sixth model's
        compose([f"store={store}", *CELL, "+model.gradkernels=true"])

    cfg = compose([f"store={store}", *CELL, *GRID])
    r = runner(cfg)
    cells = grid_cells(r.settings)
    assert cells == [Cell("toy_core17", "none", 128, "cosine", 1), Cell("toy_core17", "msm", 128, "cosine", 1)]
    means = {c: run_cell(r, c) for c in cells}
    for m in means.values():
        assert {"nDCG@10", "P@1", "MFR"} <= set(m)
        assert 0 <= m["nDCG@10"] <= 1 and 0 <= m["P@1"] <= 1 and m["MFR"] >= 1

    # the checkpoint names its model and loads back as it, with the weights it was trained to
    path = r.path(cells[1].ask("train"))
    model = load_checkpoint(path)
    assert type(model) is Cosine and model.config()["maxqlen"] == 4
    assert torch.equal(model.scale.weight, torch.load(path / "model.pt")["scale.weight"])

    # plan counts it from its file's plan: block
    info = plan(cfg, r)
    assert info["throughput_source"] == {"cosine": "assumed"}
    instances = info["training_instances_per_model"]["cosine"]
    assert instances > 0 and info["train_gpu_hours"]["cosine"] == pytest.approx(instances / 1000 / 3600)

    # the tables name it by its label
    tables = write_tables(cfg, r)
    texts = "\n".join(p.read_text() for p in tables.rglob("*.md"))
    assert "Cosine" in texts, sorted(p.name for p in tables.rglob("*"))
