"""The re-rankers and their registry (name -> class). A model is one module: its network, its settings schema
(``Settings``), its label (``LABEL``) and what its documents' encoding reads; adding one is its module, its
``conf/model/<name>.yaml`` and one line in :func:`_register_all` (or a call to :func:`register` from the user's own
code; tests/test_sixth_model.py adds one so)."""

from __future__ import annotations

import json
from pathlib import Path

from leakexp.models.base import Reranker
from leakexp.models.duet import DUET
from leakexp.models.knrm import KNRM
from leakexp.models.monobert import MonoBERT
from leakexp.models.monot5 import MonoT5
from leakexp.models.pacrr import PACRR
from leakexp.runner.schema import SECTIONS, section

REGISTRY: dict[str, type[Reranker]] = {}
# how tables and captions name each model, from the models themselves (its settings schema: the section models.<name>)
MODEL_LABEL: dict[str, str] = {}


def register(name: str, cls: type[Reranker]) -> None:
    """Make ``cls`` the model ``model=<name>`` selects: the registry, the settings schema and the label change
    together, so a model registered later (a user's sixth) is known everywhere the first five are."""
    if name in REGISTRY:
        raise ValueError(f"model {name!r} is already registered")
    section(f"models.{name}")(cls.Settings)
    REGISTRY[name] = cls
    MODEL_LABEL[name] = cls.LABEL


def unregister(name: str) -> None:
    """Forget a registered model (tests that add one)."""
    for table in (REGISTRY, MODEL_LABEL):
        table.pop(name, None)
    SECTIONS.pop(f"models.{name}", None)


def get(name: str) -> type[Reranker]:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(sorted(REGISTRY))}") from None


def load_checkpoint(path: str | Path, *, idf=None) -> Reranker:
    """Any leakexp checkpoint directory back as a model, in one call.

    ``idf``: the df table (:class:`~leakexp.models.capreolus.IdfTable`) of the collection the model will rank;
    models that read idf (``model.needs_idf``) need it, the others ignore it.
    """
    path = Path(path)
    meta = path / "model.json"
    if not meta.exists():
        raise FileNotFoundError(f"{path} is not a leakexp checkpoint (no model.json)")
    model = get(json.loads(meta.read_text())["name"]).load(path)
    if idf is not None and hasattr(model, "use_idf"):
        model.use_idf(idf)
    return model


def _register_all() -> None:
    for cls in (MonoT5, MonoBERT, KNRM, DUET, PACRR):
        register(cls.name, cls)


_register_all()
