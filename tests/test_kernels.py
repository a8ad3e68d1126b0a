"""The same numbers on every machine: the CPU kernels leakexp pins, and what another machine's kernels change.

Another CPU is played by the variables its libraries would choose by themselves: ATen's portable kernels
(``ATEN_CPU_CAPABILITY=default``) and an AVX2 machine's MKL, OpenBLAS and Faiss code paths. Under them the SBERT
embeddings' last bits differ; the leakage path's decisions (detection, review, leaks, training sets) must not, and
with ``cpu_kernels=portable`` a trained model and its re-ranking must be the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from leakexp.runner import kernels

SMALL = ["experiment=demo", "data.queries_per_source=600", "grid.sizes=[128]", "grid.models=[duet]",
         "grid.seeds=[1]"]
# an AVX2 machine's math libraries, as they would choose on such a CPU
AVX2_MACHINE = {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "OPENBLAS_CORETYPE": "Haswell", "FAISS_SIMD_LEVEL": "AVX2",
                "ATEN_CPU_CAPABILITY": "avx2"}


def test_the_command_line_or_the_environment_chooses_the_mode(monkeypatch):
    monkeypatch.delenv(kernels.ENV, raising=False)
    assert kernels.requested([]) == "portable"
    assert kernels.requested(["demo", "cpu_kernels=native"]) == "native"
    monkeypatch.setenv(kernels.ENV, "native")
    assert kernels.requested(["demo"]) == "native"
    assert kernels.requested(["demo", "cpu_kernels=portable"]) == "portable"


def test_pinning_sets_every_librarys_variable_and_native_sets_none(monkeypatch):
    for name in [*kernels.portable_environment(), kernels.ENV]:
        monkeypatch.delenv(name, raising=False)
    assert kernels.pin_environment(["demo", "cpu_kernels=native"]) == "native"
    assert "ATEN_CPU_CAPABILITY" not in os.environ and kernels.in_effect() == "native"
    assert os.environ[kernels.ENV] == "native"  # what the commands it starts are told
    monkeypatch.delenv(kernels.ENV)
    assert kernels.pin_environment(["demo"]) == "portable"
    assert os.environ["ATEN_CPU_CAPABILITY"] == "default" and os.environ["FAISS_SIMD_LEVEL"] == "NONE"
    if os.uname().machine == "x86_64":
        assert os.environ["MKL_CBWR"] == "COMPATIBLE,STRICT" and os.environ["OPENBLAS_CORETYPE"] == "Prescott"
    assert kernels.in_effect() == "portable"


def test_an_artifact_computed_under_portable_kernels_has_onednn_off():
    import torch

    from leakexp.runner.jobs import compute_threads
    from leakexp.runner.stage import Runtime

    before = torch.backends.mkldnn.enabled
    try:
        with compute_threads(False, Runtime(cpu_kernels="portable")):
            assert not torch.backends.mkldnn.enabled and torch.get_num_threads() == 1
        with compute_threads(False, Runtime(cpu_kernels="native")):
            assert torch.backends.mkldnn.enabled
    finally:
        torch.backends.mkldnn.enabled = before


def test_an_unknown_mode_is_refused_naming_the_setting():
    from leakexp.runner.registry import compose
    from leakexp.runner.stage import ConfigError

    with pytest.raises(ConfigError, match="cpu_kernels: input should be 'portable' or 'native'"):
        compose(["cpu_kernels=fast"])


def _leakexp(store: Path, args: list[str], env: dict[str, str]) -> None:
    base = {k: v for k, v in os.environ.items() if k not in (*AVX2_MACHINE, "MKL_CBWR", kernels.ENV)}
    cmd = [sys.executable, "-m", "leakexp.cli.main", *args, *SMALL, f"store={store}"]
    done = subprocess.run(cmd, env={**base, "LEAKEXP_WORKERS": "1", **env}, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def _artifacts(store: Path, stage: str) -> dict[str, dict]:
    """Each artifact of a stage (by its readable path and key) -> its files' checksums."""
    out = {}
    for marker in sorted((store / stage).rglob("DONE.json")):
        files = json.loads(marker.read_text())["files"]
        out[marker.parent.relative_to(store).as_posix()] = {k: v["blake2b"] for k, v in files.items()}
    return out


@pytest.mark.slow  # the leakage path computed four times from scratch and a Duet cell thrice: ~3 minutes on 2 cores
def test_other_kernels_change_the_embeddings_but_no_training_set_and_portable_kernels_change_nothing(tmp_path):
    runs = {"native": {kernels.ENV: "native"},
            "aten-default": {kernels.ENV: "native", "ATEN_CPU_CAPABILITY": "default"},
            "avx2-machine": {kernels.ENV: "native", **AVX2_MACHINE},
            "portable": {kernels.ENV: "portable"}}
    for name, env in runs.items():
        _leakexp(tmp_path / name, ["build"], env)
    embed = {name: _artifacts(tmp_path / name, "embed") for name in runs}
    assert embed["aten-default"] != embed["native"]  # the noise is there (SBERT's last bits) ...
    sets = {name: _artifacts(tmp_path / name, "build") for name in runs}
    # ... and decides nothing (7 sets: None's is one set for the three corpora)
    assert len(sets["native"]) == 7 and all(s == sets["native"] for s in sets.values())
    verified = {name: _artifacts(tmp_path / name, "verify") for name in runs}
    assert all(v == verified["native"] for v in verified.values())  # review, annotations, near-threshold list
    # one model's cell: under portable kernels, another machine's libraries train and re-rank the same bytes
    cell = ["corpus=toy_robust", "leakage=msm", "size=128", "model=duet", "seed=1"]
    for name, env in (("portable", {}), ("portable-avx2-machine", AVX2_MACHINE)):
        store = tmp_path / name
        if not store.exists():
            shutil.copytree(tmp_path / "portable", store)
        _leakexp(store, ["cell", *cell], {kernels.ENV: "portable", **env})
    _leakexp(tmp_path / "native", ["cell", *cell], {kernels.ENV: "native"})
    trained = {name: (_artifacts(tmp_path / name, "train"), _artifacts(tmp_path / name, "rerank"))
               for name in ("portable", "portable-avx2-machine", "native")}
    assert trained["portable"] == trained["portable-avx2-machine"]
    assert trained["portable"][0].keys() == trained["native"][0].keys()  # the same keys ...
    assert trained["portable"] != trained["native"]  # ... other bytes: the pin decides them
