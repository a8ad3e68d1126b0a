"""requirements.lock pins every dependency `make setup` installs, and this environment runs at those versions."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version and re.fullmatch(r"[\w.+!-]+", version), f"requirements.lock: {line!r} is not name==version"
            pins[canonicalize_name(name)] = version
    return pins


def test_every_dependency_and_dev_extra_is_pinned_within_its_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _lock()
    for spec in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        if name == "torch":  # installed first and explicitly by the Makefile (the CPU build)
            continue
        assert name in pins, f"{req.name} is not pinned in requirements.lock (run make lock)"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req.name}=={pins[name]} is outside {spec!r}"


def test_this_environment_runs_the_locked_versions():
    """What `make setup` installed is what the lock says (a stale .venv: `make setup` again)."""
    differ = {}
    for name, version in _lock().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            differ[name] = (version, None)
            continue
        if installed != version:
            differ[name] = (version, installed)
    assert differ == {}


def test_make_setup_installs_under_the_lock():
    makefile = (ROOT / "Makefile").read_text()
    assert "-c $(LOCK) -e '.[dev]'" in makefile and "LOCK := requirements.lock" in makefile
    assert re.search(r"^lock: ", makefile, re.M)
