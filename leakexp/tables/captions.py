"""What the captions say about how the models were trained and scored (the recipes, their learning rates and
budgets, float16 scores, unit-length GloVe rows): one sentence per model, from the configuration alone."""

from __future__ import annotations

from leakexp.lib.trainer import Training
from leakexp.models import MODEL_LABEL
from leakexp.runner.schema import Settings

_MESH_TF = ("the SPIRE-22 authors' recipe (webis-de/SPIRE-22 train-mono-t5.sh: Mesh TensorFlow's Adafactor with "
            "parameter-scaled updates, constant learning rate, z-loss; ")
RECIPE_TEXT = {
    "mesh_tf": _MESH_TF + "128 sequences per update, T5's fine-tuning batch: the script's operative config is not "
                          "public)",
    "mesh_tf_train_steps": _MESH_TF + "128 sequences per update, T5's fine-tuning batch: the script's operative "
                                      "config is not public)",
    "mesh_tf_default_batch": _MESH_TF + "Mesh TF's default batch of 2,048 tokens on the script's one device, 4 "
                                        "sequences per update: the script's operative config is not public)",
    "pygaggle_hf": "PyGaggle's later Hugging Face recipe (finetune_monot5.py: HF Adafactor, warmup, linear decay)",
    "dl4marco": "dl4marco-bert's MS MARCO settings with BERT's optimiser (no bias correction) and schedule (the paper "
                "and its repository give no monoBERT recipe)",
    "dl4marco_torch_adamw": "dl4marco-bert's MS MARCO settings with torch's AdamW (bias-corrected) instead of BERT's "
                            "optimiser (the paper and its repository give no monoBERT recipe)",
    "bert_glue": "BERT's fine-tuning learning rate (google-research/bert; the paper and its repository give no "
                 "monoBERT recipe)",
}


def recipe_note(s: Settings, models) -> str:
    """One sentence per model of ``models`` that has named recipes (monoT5, monoBERT): which recipe, learning rate
    and budget trained it under ``s``, and the budget the paper's text and the authors' script disagree on."""
    out = []
    for model in models:
        recipe = s.recipe_of(model)
        if recipe is None:
            continue
        t = Training.of(s.model_of(model).train.model_dump(), s.train.model_dump())
        budget = (f"{t.updates:,} updates" if t.updates is not None else
                  f"{t.epochs} epoch{'s' if t.epochs != 1 else ''}" + (" (the paper's text)" if t.epochs == 1 else ""))
        text = f"{MODEL_LABEL.get(model, model)}: {RECIPE_TEXT.get(recipe, 'recipe ' + recipe)} ({model}.recipe={recipe}), {t.optimizer}, " \
               f"lr {t.lr:g}, {2 * t.batch_size * t.grad_accum} instances per update" + \
               (f", z-loss {t.z_loss:g}" if t.z_loss else "") + f", {budget}"
        if recipe.startswith("mesh_tf"):
            text += "; the authors' script runs 100,000 updates (run.train_steps = 1100000 from a 1M-step checkpoint)"
        out.append(text)
    note = (" Training: " + "; ".join(out) + ".") if out else ""
    return note + scoring_note(s, models)


def scoring_note(s: Settings, models) -> str:
    """The sentence that says which models' scores are rounded to float16 before ranking, and which read GloVe rows
    at unit length, as Capreolus v0.2.x does (experiment=paper for KNRM, PACRR and DUET); empty when none."""
    settings = {m: s.model_of(m) for m in models}
    half = [MODEL_LABEL.get(m, m) for m, c in settings.items() if c.score_dtype == "float16"]
    unit = [MODEL_LABEL.get(m, m) for m, c in settings.items() if getattr(c, "unit_vectors", False)]
    out = ""
    if half:
        out += (f" Scores of {', '.join(half)} are rounded to float16 before ranking, as Capreolus v0.2.x stores them "
                "(trainer/pytorch.py predict), ties going to the smaller docno (score_dtype=float16).")
    if unit:
        out += (f" {', '.join(unit)} read GloVe rows at unit length, as pymagnitude gives them to Capreolus "
                "(unit_vectors=true).")
    return out


# Test leakage on the Common Core corpora: the paper's text against the authors' training-set names
# (webis-de/SPIRE-22 @ f3ab030, src/main/resources/run-files/create-static-run-files.ipynb lines 36 and 38:
# '…-and-400-explicit-nyt-train-leakage', '…-and-400-explicit-wapo-train-leakage', sizes counted in instances as in
# '1k-…' / '2k-…'); Robust04's '…-and-1k-robust04' (line 34) agrees with the paper's 500 queries = 1,000 instances.
PAPER_TEST_LEAK_QUERIES = {"core17": 100, "core18": 100, "robust04": 500}
AUTHORS_SETS_TEST_LEAK_QUERIES = {"core17": 200, "core18": 200, "robust04": 500}


def core_test_leak_note(s: Settings, corpora) -> str:
    """What a caption says about the test-leakage size of the Core corpora among ``corpora``: the count that ran and
    whether it is the paper's text (100 queries = 200 instances: each topic twice) or the authors' set names (400
    instances: each topic four times)."""
    out = []
    for corpus in corpora:
        if corpus not in ("core17", "core18"):
            continue
        n = s.corpus_of(corpus).test_leak_queries
        which = ("the paper's text" if n == PAPER_TEST_LEAK_QUERIES[corpus] else "the authors' set names, "
                 "'...-and-400-explicit-(nyt|wapo)-train-leakage'" if n == AUTHORS_SETS_TEST_LEAK_QUERIES[corpus] else
                 "neither the paper's 200 instances nor the authors' sets' 400")
        out.append(f"{corpus} {n} queries = {2 * n} instances ({which})")
    if not out:
        return ""
    return (" Test leakage on Common Core: " + "; ".join(out) + "; the paper says 100 queries (200 instances), the "
            "authors' set names 400 instances (corpus_overrides.<corpus>.test_leak_queries=200).")
