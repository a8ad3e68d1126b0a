"""The authors' recipes as named settings: monoT5's Mesh TF recipe (experiment=paper) and budget, monoBERT's two
learning rates, one precision switch, the Core test-leakage size; each selected with one override."""

import pytest
import torch
from conftest import paper_env

from leakexp.lib.adafactor import MeshAdafactor
from leakexp.runner.config import ConfigError, compose_raw, model_recipe
from leakexp.runner.registry import compose
from leakexp.tables.captions import core_test_leak_note
from leakexp.lib.adafactor import Adafactor
from leakexp.lib.trainer import PrecisionSettings, Training, make_optimizer
from leakexp.tables.captions import recipe_note


def train_config(cfg, model: str) -> Training:
    return Training.of(cfg.values["models"][model]["train"], cfg.values["train"])


def test_paper_trains_monot5_by_the_authors_mesh_tf_recipe_for_one_epoch():
    cfg = compose(["experiment=paper"])
    t = train_config(cfg, "monot5")
    assert cfg.recipe_of("monot5") == "mesh_tf"
    assert (t.optimizer, t.lr, t.warmup, t.decay, t.weight_decay, t.max_grad_norm) == \
        ("adafactor_mesh", 1e-3, 0.0, "constant", 0.0, None)
    assert (t.epochs, t.updates, t.batch_size * t.grad_accum * 2, t.z_loss) == (1, None, 128, 1e-4)
    opt = make_optimizer(torch.nn.Linear(4, 3), t)
    assert type(opt) is MeshAdafactor and opt.param_groups[0]["lr"] == 1e-3
    note = recipe_note(cfg, ["monot5"])
    assert "mesh_tf" in note and "1 epoch (the paper's text)" in note
    assert "128 instances per update, z-loss 0.0001" in note


def test_one_override_selects_the_scripts_budget_or_pygaggles_recipe():
    steps = compose(["experiment=paper", "model_overrides.monot5.recipe=mesh_tf_train_steps"])
    assert train_config(steps, "monot5").updates == 100_000 and "100,000 updates" in recipe_note(steps, ["monot5"])
    hf = train_config(compose(["experiment=paper", "model_overrides.monot5.recipe=pygaggle_hf"]), "monot5")
    assert (hf.optimizer, hf.lr, hf.warmup, hf.decay, hf.weight_decay) == ("adafactor", 3e-4, 0.01, "linear", 5e-5)
    assert type(make_optimizer(torch.nn.Linear(4, 3), hf)) is Adafactor
    # what the experiment or the command line sets in train: wins over the recipe
    lr = compose(["experiment=paper", "model_overrides.monot5.train.lr=5e-4"])
    assert train_config(lr, "monot5").lr == 5e-4 and train_config(lr, "monot5").optimizer == "adafactor_mesh"
    # the decay rate continued from the authors' checkpoint's step instead of a fresh optimiser's
    cont = train_config(compose(["experiment=paper", "model_overrides.monot5.train.adafactor_start_step=999900"]), "monot5")
    assert make_optimizer(torch.nn.Linear(4, 3), cont).start_step == 999_900


def test_z_loss_is_the_mesh_tf_recipes_and_other_recipes_keep_their_keys(tmp_path):
    """z_loss is a schema default (0) that only the mesh_tf recipes set: the demo's monoT5 (pygaggle_hf) resolves to
    the same train block as before, with no z_loss key, so its artifacts keep their keys."""
    demo = compose([f"store={tmp_path}"])
    assert "z_loss" not in demo.values["models"]["monot5"]["train"] and train_config(demo, "monot5").z_loss == 0
    for recipe in ("mesh_tf", "mesh_tf_train_steps", "mesh_tf_default_batch"):
        cfg = compose(["experiment=paper", f"model_overrides.monot5.recipe={recipe}"])
        assert train_config(cfg, "monot5").z_loss == 1e-4
    hf = compose(["experiment=paper", "model_overrides.monot5.recipe=pygaggle_hf"])
    assert train_config(hf, "monot5").z_loss == 0


def test_the_captions_name_the_recipe_the_configuration_resolves():
    """The typed model settings hold the train: block a recipe makes, not its name: Settings.recipe_of names it as
    model_recipe does, from the model's file, model_overrides and the command line's model.recipe."""
    for overrides in ([], ["experiment=paper"], ["experiment=paper", "model_overrides.monot5.recipe=pygaggle_hf"],
                      ["model=monot5", "model.recipe=mesh_tf_train_steps"],
                      ["experiment=paper", "model=monot5", "model.recipe=pygaggle_hf"],
                      ["model=monobert", "model.recipe=bert_glue"]):
        s, raw = compose(overrides), compose_raw(overrides)
        for model in s.model_names:
            assert s.recipe_of(model) == model_recipe(raw, model), (overrides, model)
    assert compose(["model=monot5", "model.recipe=mesh_tf_train_steps"]).recipe_of("monot5") \
        == "mesh_tf_train_steps"


def test_the_other_reading_of_mesh_tfs_batch_is_one_override(tmp_path, monkeypatch):
    """mesh_tf: 128 sequences per update (T5's fine-tuning batch of 65,536 tokens, assumed); mesh_tf_default_batch:
    Mesh TF's utils.run default, 2,048 tokens per replica on the script's one device = 4 sequences of 512."""
    from leakexp.stages.cell import grid_cells
    from leakexp.runner.registry import runner

    def trained(recipe):
        cfg = compose([f"store={tmp_path}", *paper_env(tmp_path, monkeypatch),
                       f"model_overrides.monot5.recipe={recipe}"])
        t = train_config(cfg, "monot5")
        cell = next(c for c in grid_cells(cfg) if c.model == "monot5")
        return t, runner(cfg, readonly=True, files=False).key(cell.ask("train")), recipe_note(cfg, ["monot5"])

    (paper, paper_key, paper_note), (tokens, tokens_key, note) = trained("mesh_tf"), trained("mesh_tf_default_batch")
    assert (paper.batch_size * paper.grad_accum * 2, tokens.batch_size * tokens.grad_accum * 2) == (128, 4)
    assert tokens.model_copy(update=dict(batch_size=paper.batch_size, grad_accum=paper.grad_accum)) == paper
    assert paper_key != tokens_key
    assert "4 instances per update" in note and "2,048 tokens" in note and "128 instances per update" in paper_note


def test_torch_adamw_is_a_named_monobert_recipe(tmp_path):
    """dl4marco trains with BERT's optimiser and schedule; dl4marco_torch_adamw with torch's AdamW and the warmup
    to the peak, the same artifact as setting those two values in train:."""
    from leakexp.lib.bert_adam import BertAdamW
    from leakexp.stages.cell import grid_cells
    from leakexp.runner.registry import runner

    def trained(*extra):
        cfg = compose([f"store={tmp_path}", "~model_overrides.monobert.train", *extra])
        cell = next(c for c in grid_cells(cfg) if c.model == "monobert")
        return train_config(cfg, "monobert"), runner(cfg, readonly=True).key(cell.ask("train"))

    (bert, bert_key), (adamw, adamw_key) = trained(), trained("model_overrides.monobert.recipe=dl4marco_torch_adamw")
    assert type(make_optimizer(torch.nn.Linear(4, 3), bert)) is BertAdamW and bert.decay == "bert"
    assert type(make_optimizer(torch.nn.Linear(4, 3), adamw)) is torch.optim.AdamW and adamw.decay == "linear"
    assert (adamw.lr, adamw.weight_decay, adamw.adam_eps) == (bert.lr, bert.weight_decay, bert.adam_eps)
    assert bert_key != adamw_key
    assert trained("model_overrides.monobert.train.optimizer=adamw", "model_overrides.monobert.train.decay=linear")[1] \
        == adamw_key


def test_an_unknown_recipe_names_the_choices():
    from leakexp.runner.registry import compose as checked

    with pytest.raises(ConfigError, match="mesh_tf, mesh_tf_train_steps"):
        checked(["experiment=paper", "model_overrides.monot5.recipe=mesh"])


def test_the_monobert_alternative_changes_the_optimisers_lr_and_the_training_key(tmp_path):
    """bert_glue (lr 2e-5, 32 instances per update, google-research/bert) against dl4marco (lr 3e-6, 128): the
    optimiser's lr and the train artifact's key (the demo's own monoBERT block removed, so the recipes show)."""
    from leakexp.stages.cell import grid_cells
    from leakexp.runner.registry import runner

    def trained(*extra):
        cfg = compose([f"store={tmp_path}", "~model_overrides.monobert.train", *extra])
        t = train_config(cfg, "monobert")
        opt = make_optimizer(torch.nn.Linear(4, 3), t)
        r = runner(cfg, readonly=True)
        cell = next(c for c in grid_cells(cfg) if c.model == "monobert")
        return opt.param_groups[0]["lr"], t.batch_size * t.grad_accum * 2, r.key(cell.ask("train"))

    base, glue = trained(), trained("model_overrides.monobert.recipe=bert_glue")
    assert base[:2] == (3e-6, 128) and glue[:2] == (2e-5, 32)
    assert base[2] != glue[2]


def test_one_override_gives_the_references_fp32():
    """precision.bf16=false: neither training nor re-ranking autocasts (the stages read train_bf16 / rerank_bf16)."""
    for overrides, bf16 in (([], True), (["precision.bf16=false"], False), (["experiment=paper", "precision.bf16=false"],
                                                                             False)):
        settings = compose(overrides).precision
        assert isinstance(settings, PrecisionSettings)
        assert (settings.train_bf16, settings.rerank_bf16) == (bf16, bf16), overrides
        cfg = Training.of_model("knrm", bf16=settings.train_bf16)
        assert cfg.bf16 is bf16


def test_core_test_leakage_defaults_to_the_papers_text_and_the_authors_sets_are_one_override():
    paper = compose(["experiment=paper"])
    assert "core17 100 queries = 200 instances (the paper's text)" in core_test_leak_note(paper, ["core17"])
    sets = compose(["experiment=paper", "corpus_overrides.core18.test_leak_queries=200"])
    assert "core18 200 queries = 400 instances (the authors' set names" in core_test_leak_note(sets, ["core18"])
    assert core_test_leak_note(paper, ["robust04"]) == ""


def test_the_trainer_runs_the_mesh_recipe_at_a_constant_learning_rate():
    """adafactor_mesh through the trainer: a constant 1e-3 on every update (no warmup, no decay), a finite loss."""
    import pandas as pd

    from leakexp.models import REGISTRY
    from leakexp.lib.trainer import set_seed, train

    rows = []
    for i in range(12):
        rows += [(i, f"q{i}", "lyme tick", f"d{i}+", "the lyme and the tick report", 1),
                 (i, f"q{i}", "lyme tick", f"d{i}-", "weather sports market", 0)]
    instances = pd.DataFrame(rows, columns=["pair", "qid", "query", "docno", "text", "label"])
    set_seed(0)
    model = REGISTRY["knrm"](maxdoclen=8)
    cfg = Training(batch_size=4, lr=1e-3, optimizer="adafactor_mesh", decay="constant", warmup=0.0)
    result = train(model, instances, seed=1, cfg=cfg, progress=False)
    assert result["updates"] == 3 and (result.history.lr == 1e-3).all()
    assert result.history.loss.notna().all()
    with pytest.raises(ValueError, match="no weight decay"):
        Training(optimizer="adafactor_mesh", weight_decay=0.01)
