"""Training survives its time limit: a resumable state saved on a timer and on SIGUSR2 / SIGTERM, from which a re-run
(or a requeued job) continues to the very weights and history of a run that never stopped."""

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

import leakexp.lib.trainer as training
from leakexp.models import REGISTRY
from leakexp.models.capreolus import IdfTable
from leakexp.runner.config import runtime
from leakexp.runner.store import Store
from leakexp.stages.cell import cell_from_config
from leakexp.runner.registry import compose, runner
from leakexp.lib.trainer import ResumeState, Training, set_seed, train

ROOT = Path(__file__).resolve().parents[1]


def pairs(n: int = 10) -> pd.DataFrame:
    rows = []
    for i in range(n):
        rows += [(i, f"q{i}", f"lyme tick {i % 3}", f"d{i}+", f"the lyme and the tick report {i}", 1),
                 (i, f"q{i}", f"lyme tick {i % 3}", f"d{i}-", f"weather sports market {i}", 0)]
    return pd.DataFrame(rows, columns=["pair", "qid", "query", "docno", "text", "label"])


WORDS = "the lyme and tick report weather sports market 0 1 2 3 4 5 6 7 8 9".split()


@pytest.fixture(scope="module")
def vectors(tmp_path_factory) -> str:
    """Small GloVe-format word vectors: a state of a few kB, saved and read in milliseconds."""
    path = tmp_path_factory.mktemp("vectors") / "tiny.txt"
    rng = torch.Generator().manual_seed(0)
    path.write_text("".join(f"{w} {' '.join(f'{x:.4f}' for x in torch.randn(8, generator=rng).tolist())}\n"
                            for w in WORDS))
    return str(path)


@pytest.fixture(scope="module")
def duet(vectors):
    """DUET with dropout: the random state of every update matters."""

    def build():
        set_seed(3)
        model = REGISTRY["duet"](embeddings=vectors, maxqlen=4, maxdoclen=104, nhidden=3, nfilters=16, lmhidden=16,
                                 dropoutrate=0.5)
        model.use_idf(IdfTable.from_docs(pairs().text.tolist()))
        return model

    return build


# updates over reshuffled passes, two micro-batches per update, warmup and decay: every piece of the state counts
CFG = Training(batch_size=2, lr=3e-3, updates=4, grad_accum=2, warmup=0.3, decay="linear")


class Preempted(BaseException):
    """What submitit's USR2 handler does after requeueing the job: leave (it raises SystemExit)."""


def _signal_at_batch(monkeypatch, signum: int, at: int) -> None:
    """Send ``signum`` to this process while micro-batch ``at`` (1-based) is computed, as SLURM would mid-update."""
    calls = {"n": 0}
    real = training.batch_loss

    def batch_loss(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == at:
            signal.raise_signal(signum)
        return real(*args, **kwargs)

    monkeypatch.setattr(training, "batch_loss", batch_loss)


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.fixture(scope="module")
def reference(duet):
    model = duet()
    return model, train(model, pairs(), seed=3, cfg=CFG, progress=False)


def test_a_job_preempted_by_sigusr2_resumes_to_the_same_weights_and_history(reference, duet, tmp_path, monkeypatch):
    ref_model, ref = reference
    batch = 4  # the signal comes while update 2's second micro-batch is computed
    calls = []

    def submitit_like(signum, frame):  # requeues, then exits
        calls.append(signum)
        raise Preempted

    previous = signal.signal(signal.SIGUSR2, submitit_like)
    try:
        _signal_at_batch(monkeypatch, signal.SIGUSR2, batch)
        with pytest.raises(Preempted):
            train(duet(), pairs(), seed=3, cfg=CFG, progress=False, resume=ResumeState(tmp_path, "run", every_s=0))
        assert calls == [signal.SIGUSR2]  # the handler before ours acted, once, after the state was saved
        assert signal.getsignal(signal.SIGUSR2) is submitit_like  # and is back in place
        saved = torch.load(tmp_path / ResumeState.FILE, weights_only=True)
        assert saved["step"] == (batch + 1) // 2 and len(saved["history"]) == saved["step"]
        monkeypatch.undo()
        model = duet()
        resumed = train(model, pairs(), seed=3, cfg=CFG, progress=False, workers=2,  # collated elsewhere: the same
                        resume=ResumeState(tmp_path, "run", every_s=0))
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert _same(model, ref_model)
    pd.testing.assert_frame_equal(resumed.history, ref.history, check_exact=True)
    assert {k: v for k, v in resumed.items() if k not in ("seconds", "instances_per_s")} == \
        {k: v for k, v in ref.items() if k not in ("seconds", "instances_per_s")}


def test_sigterm_under_a_handler_that_ignores_it_saves_a_state_and_training_goes_on(reference, duet, tmp_path,
                                                                                    monkeypatch):
    """submitit logs and bypasses SIGTERM: the state is saved, the handler logs, and the run ends as if untouched."""
    ref_model, ref = reference
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        _signal_at_batch(monkeypatch, signal.SIGTERM, 3)
        model = duet()
        result = train(model, pairs(), seed=3, cfg=CFG, progress=False, resume=ResumeState(tmp_path, "run", every_s=0))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == [signal.SIGTERM]
    assert torch.load(tmp_path / ResumeState.FILE, weights_only=True)["step"] == 2  # batch 3: update 2's first
    assert _same(model, ref_model)
    pd.testing.assert_frame_equal(result.history, ref.history, check_exact=True)


def test_a_state_of_another_run_is_never_used(reference, duet, tmp_path, monkeypatch, caplog):
    """Another identity (another artifact key or stage version) or another run shape: ignored, training starts over."""
    ref_model, ref = reference
    previous = signal.signal(signal.SIGUSR2, lambda s, f: (_ for _ in ()).throw(Preempted()))
    try:
        _signal_at_batch(monkeypatch, signal.SIGUSR2, 3)
        with pytest.raises(Preempted):
            train(duet(), pairs(), seed=3, cfg=CFG, progress=False, resume=ResumeState(tmp_path, "key-a", every_s=0))
    finally:
        signal.signal(signal.SIGUSR2, previous)
    monkeypatch.undo()
    with caplog.at_level(logging.WARNING, logger="leakexp.lib.trainer"):
        model = duet()
        result = train(model, pairs(), seed=3, cfg=CFG, progress=False, resume=ResumeState(tmp_path, "key-b"))
    assert "of another run (key-a, not key-b)" in caplog.text
    assert _same(model, ref_model)
    pd.testing.assert_frame_equal(result.history, ref.history, check_exact=True)
    state = torch.load(tmp_path / ResumeState.FILE, weights_only=True)  # a state of this run's identity, but
    assert training._fits(state, duet(), 5, 10) == ("it is of a run of 4 updates over 8 micro-batches, this one "
                                                    "has 5 over 10")  # another budget
    knrm = REGISTRY["knrm"](embeddings=duet().hparams["embeddings"], maxdoclen=8)
    assert training._fits(state, knrm, 4, 8) == "its weights are of another model"
    assert training._fits(state, duet(), 4, 8) == ""


def test_a_state_is_saved_on_the_timer_and_only_between_updates(duet, tmp_path):
    resume = ResumeState(tmp_path, "run", every_s=1e-9)  # due after every update
    train(duet(), pairs(), seed=3, cfg=CFG, progress=False, resume=resume)
    assert len(resume.save_seconds) == CFG.updates - 1  # not after the last one: the artifact is written next
    state = torch.load(resume.path, weights_only=True)
    assert state["step"] == CFG.updates - 1 and state["pairs_seen"] == 2 * 2 * (CFG.updates - 1)
    assert not list(tmp_path.glob(".*tmp*"))  # each save replaced the file atomically


def test_the_store_removes_partial_work_once_the_artifact_is_done(tmp_path):
    store = Store(tmp_path)
    path = store.path("train", "cell", "0123456789ab")

    def compute(tmp):
        Store.partial_path(path).mkdir(parents=True)
        (Store.partial_path(path) / ResumeState.FILE).write_bytes(b"state")
        (tmp / "model.pt").write_bytes(b"weights")

    store.ensure(path, {"k": 1}, compute)
    assert (path / "model.pt").exists() and not Store.partial_path(path).exists()


def test_resume_every_s_is_a_runtime_setting_outside_every_key():
    cfgs = [compose(["store=/tmp/unused", *extra]) for extra in ([], ["resume_every_s=5"])]
    assert runtime(cfgs[1], "cpu").resume_every_s == 5.0 and runtime(cfgs[0], "cpu").resume_every_s == 300.0
    keys = [runner(c, readonly=True, files=False).key(cell_from_config(c).ask("train")) for c in cfgs]
    assert keys[0] == keys[1]


# -- killed for real: kill -9 in a child process after a state is written ----------------------------------------
CHILD = r"""
import os, signal, sys
from pathlib import Path
import pandas as pd
from leakexp.models import get
from leakexp.lib.trainer import ResumeState, Training, set_seed, train, write_history

name, checkpoint, data, out, state, kill_at, every = sys.argv[1:]
set_seed(3)
model = get(name)(maxdoclen=16) if name == "knrm" else get(name)(checkpoint=checkpoint, max_length=32)
cfg = Training(batch_size=4, lr=1e-2 if name == "knrm" else 1e-3, updates=8, grad_accum=2, warmup=0.25,
                  optimizer="adam" if name == "knrm" else "adamw", weight_decay=0.0 if name == "knrm" else 0.01)
resume = ResumeState(state, identity="child", every_s=float(every)) if state != "-" else None
if resume is not None and int(kill_at):
    save = resume.save

    def save_then_die(s):
        save(s)
        if s["step"] == int(kill_at):
            os.kill(os.getpid(), signal.SIGKILL)  # no clean-up of any kind: as kill -9 or a node going down

    resume.save = save_then_die
result = train(model, pd.read_parquet(data), seed=3, cfg=cfg, progress=False, resume=resume)
model.save(Path(out))
write_history(result.history, Path(out) / "history.csv")
"""


def _child(tmp_path: Path, name: str, checkpoint: str, out: str, state: str = "-", kill_at: int = 0,
           every: float = 0.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", CHILD, name, checkpoint, str(tmp_path / "data.parquet"),
                           str(tmp_path / out), state, str(kill_at), str(every)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)


def _killed_then_resumed_equals_uninterrupted(tmp_path: Path, name: str, checkpoint: str = "-") -> None:
    pairs(12).to_parquet(tmp_path / "data.parquet")
    state = str(tmp_path / "state")
    clean = _child(tmp_path, name, checkpoint, "clean")
    assert clean.returncode == 0, clean.stderr[-2000:]
    killed = _child(tmp_path, name, checkpoint, "killed", state, kill_at=3, every=1e-9)  # a state after each update
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (tmp_path / "killed").exists()
    assert torch.load(Path(state) / ResumeState.FILE, weights_only=True)["step"] == 3
    resumed = _child(tmp_path, name, checkpoint, "killed", state, every=0)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    files = sorted(p.relative_to(tmp_path / "clean") for p in (tmp_path / "clean").rglob("*") if p.is_file())
    assert any(f.suffix in (".pt", ".safetensors") for f in files) and Path("history.csv") in files
    assert files == sorted(p.relative_to(tmp_path / "killed") for p in (tmp_path / "killed").rglob("*") if p.is_file())
    for f in files:
        assert (tmp_path / "clean" / f).read_bytes() == (tmp_path / "killed" / f).read_bytes(), f


@pytest.mark.slow  # three child processes that each import torch (about 15 s on 2 busy cores)
def test_knrm_killed_with_sigkill_then_rerun_writes_the_bytes_of_an_uninterrupted_run(tmp_path):
    _killed_then_resumed_equals_uninterrupted(tmp_path, "knrm")


@pytest.mark.slow  # three child processes that each import transformers (about 25 s)
def test_monobert_killed_with_sigkill_then_rerun_writes_the_bytes_of_an_uninterrupted_run(tmp_path, tiny_bert):
    _killed_then_resumed_equals_uninterrupted(tmp_path, "monobert", tiny_bert)


# -- a cell's training under the command line: Ctrl-C and SIGTERM, then the same command again --------------------
LEAKEXP = [sys.executable, "-m", "leakexp.cli.main"]


def _state(store: Path) -> Path | None:
    found = sorted(store.glob(f"train/**/*.partial/{ResumeState.FILE}"))
    return found[0] if found else None


@pytest.mark.slow  # the toy world up to a training set, then four training runs in subprocesses (minutes)
def test_a_cell_stopped_by_ctrl_c_and_by_sigterm_resumes_to_the_bytes_of_an_uninterrupted_run(tmp_path):
    clean, stopped = tmp_path / "clean", tmp_path / "stopped"
    cell = ["train", "data.queries_per_source=300", "corpus=toy_core17", "leakage=none", "size=128", "model=duet",
            "train.updates=400"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert subprocess.run(LEAKEXP + cell + [f"store={clean}", "resume_every_s=0"], capture_output=True,
                          env=env).returncode == 0
    shutil.copytree(clean, stopped)  # everything upstream of training, as computed once
    shutil.rmtree(stopped / "train")
    steps = []
    for signum, code in ((signal.SIGINT, 130), (signal.SIGTERM, -signal.SIGTERM)):
        before = torch.load(_state(stopped), weights_only=True)["step"] if _state(stopped) else 0
        # SIGINT handled as from a terminal even where the suite runs with it ignored (a background job)
        proc = subprocess.Popen(LEAKEXP + cell + [f"store={stopped}", "resume_every_s=1"], env=env, text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None and not (
                _state(stopped) and torch.load(_state(stopped), weights_only=True)["step"] > before):
            time.sleep(0.2)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == code, err[-2000:]
        if signum == signal.SIGINT:  # Ctrl-C: at once, as before, and the state saved so far stays
            assert "interrupted; re-run the same command to resume" in err and "Traceback" not in err
        steps.append(torch.load(_state(stopped), weights_only=True)["step"])
        assert before < steps[-1] < 400, err[-2000:]
    assert "SIGTERM received: a resumable training state is saved after this update" in err
    again = subprocess.run(LEAKEXP + cell + [f"store={stopped}"], capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming at update {steps[-1]} of 400" in again.stderr
    assert _state(stopped) is None and not list(stopped.glob("train/**/*.partial"))  # removed once done
    trained = {s: next(s.glob("train/**/DONE.json")).parent for s in (clean, stopped)}
    assert trained[clean].relative_to(clean) == trained[stopped].relative_to(stopped)  # one key: resume_every_s is none
    for name in ("model.pt", "history.csv", "manifest.json"):
        assert (trained[clean] / name).read_bytes() == (trained[stopped] / name).read_bytes(), name
