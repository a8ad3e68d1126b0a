"""What Hydra users expect of a command that takes overrides: ``--help`` lists the config groups and their options,
``--cfg job|hydra|all`` prints the composed configuration and computes nothing, ``--info`` the search path, the
defaults and the groups; and a user's configuration directory (``$LEAKEXP_CONF``, ``~/.config/leakexp/conf``) adds
a corpus or replaces a shipped file without an edit of the source tree, for ``leakexp`` and ``leakexp-run`` alike."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from leakexp.cli.main import main
from leakexp.runner.config import conf_dir

CONF = conf_dir()


def leakexp(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def shipped_groups() -> dict[str, list[str]]:
    """conf/'s groups as its folders hold them: every folder with YAML files, and their names."""
    groups: dict[str, list[str]] = {}
    for path in sorted(CONF.rglob("*.yaml")):
        if path.parent != CONF:
            groups.setdefault(path.parent.relative_to(CONF).as_posix(), []).append(path.stem)
    return groups


def help_groups(out: str) -> dict[str, list[str]]:
    section = out.split("config groups (")[1].splitlines()[1:]
    return {line.split()[0]: line.split(None, 1)[1].split(", ") for line in section if line.startswith("  ")}


@pytest.fixture(autouse=True)
def _no_user_conf(monkeypatch, tmp_path):
    """No user configuration of the machine's (an XDG directory of the home) reaches these tests."""
    monkeypatch.delenv("LEAKEXP_CONF", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


@pytest.mark.parametrize("command", ["train", "cell", "grid", "tables", "status", "fetch"])
def test_help_lists_the_config_groups_and_their_options_from_conf(command, capsys):
    rc, out, _ = leakexp(capsys, command, "--help")
    assert rc == 0
    groups = help_groups(out)
    assert groups == shipped_groups()
    assert {"corpus", "leakage", "model", "experiment", "hydra/launcher"} <= set(groups)
    assert "--cfg" in out and "--info" in out


def test_cfg_job_prints_the_composed_configuration_and_computes_nothing(capsys, tmp_path):
    store = tmp_path / "store"
    rc, out, err = leakexp(capsys, "train", "--cfg", "job", f"store={store}", "model=duet", "seed=3", "train.epochs=2")
    assert rc == 0, err
    cfg = yaml.safe_load(out)
    assert cfg["model"]["name"] == "duet" and cfg["seed"] == 3 and cfg["train"]["epochs"] == 2
    assert cfg["store"] == str(store) and "hydra" not in cfg
    assert set(cfg) >= {"data", "corpus", "leakage", "grid", "evaluate"}
    assert not store.exists()  # nothing computed, no store made

    rc, out, _ = leakexp(capsys, "cell", "--cfg", "hydra", f"store={store}")
    assert rc == 0 and list(yaml.safe_load(out)) == ["hydra"]
    rc, out, _ = leakexp(capsys, "cell", "--cfg", "all", f"store={store}")
    both = yaml.safe_load(out)
    assert rc == 0 and "hydra" in both and both["model"]["name"] == "knrm"
    rc, out, _ = leakexp(capsys, "cell", "--cfg", "job", "--resolve", "store=${oc.env:HOME}/s")
    assert rc == 0 and yaml.safe_load(out)["store"] == f"{Path.home()}/s"
    assert not store.exists()


def test_cfg_of_a_bad_override_is_the_usual_config_error(capsys):
    rc, _, err = leakexp(capsys, "train", "--cfg", "job", "model=nope")
    assert rc == 2 and "model=nope is unknown" in err


def test_info_prints_the_search_path_the_defaults_and_the_groups(capsys):
    rc, out, err = leakexp(capsys, "status", "--info", "corpus=toy_core17", "model=pacrr")
    assert rc == 0, err
    path = out.split("Config search path")[1].split("\n\n")[0].splitlines()[1:]
    assert [p.strip() for p in path] == [str(CONF)]
    assert f"  corpus: toy_core17  ({CONF / 'corpus' / 'toy_core17.yaml'})" in out
    assert f"  model: pacrr  ({CONF / 'model' / 'pacrr.yaml'})" in out
    for group, names in shipped_groups().items():
        assert f"  {group}: {', '.join(names)}" in out


def user_conf(root: Path) -> Path:
    """A user's configuration: a corpus of its own and a shipped corpus's file replaced (one value changed)."""
    (root / "corpus").mkdir(parents=True)
    text = (CONF / "corpus" / "toy_robust.yaml").read_text()
    (root / "corpus" / "mycorpus.yaml").write_text(text.replace("name: toy_robust", "name: mycorpus"))
    assert "fixed_leak_queries: 60" in text
    (root / "corpus" / "toy_robust.yaml").write_text(text.replace("fixed_leak_queries: 60", "fixed_leak_queries: 58"))
    return root


MINE = ["corpus=mycorpus", "data.corpora=[toy_robust,toy_core17,toy_core18,mycorpus]"]


def test_a_corpus_in_leakexp_conf_is_selectable_and_listed(capsys, monkeypatch, tmp_path):
    from leakexp.runner.registry import compose

    mine = user_conf(tmp_path / "mine")
    rc, out, _ = leakexp(capsys, "cell", "--help")
    assert "mycorpus" not in help_groups(out)["corpus"]
    monkeypatch.setenv("LEAKEXP_CONF", str(mine))
    rc, out, _ = leakexp(capsys, "cell", "--help")
    assert rc == 0 and help_groups(out)["corpus"] == sorted([*shipped_groups()["corpus"], "mycorpus"])
    s = compose([f"store={tmp_path / 'store'}", *MINE])
    assert s.corpus.name == "mycorpus" and s.corpus_of("mycorpus").name == "mycorpus"
    assert s.corpus_of("toy_robust").fixed_leak_queries == 58  # the user's file replaces the shipped one
    rc, out, _ = leakexp(capsys, "cell", "--cfg", "job", *MINE)
    assert rc == 0 and yaml.safe_load(out)["corpus"]["name"] == "mycorpus"
    rc, out, _ = leakexp(capsys, "cell", "--info", *MINE)
    assert f"  corpus: mycorpus  ({mine / 'corpus' / 'mycorpus.yaml'})" in out
    assert [p.strip() for p in out.split("Config search path")[1].split("\n\n")[0].splitlines()[1:]] == \
        [str(mine), str(CONF)]


def test_leakexp_run_finds_the_user_corpus_on_hydras_search_path(monkeypatch, tmp_path):
    """leakexp-run is Hydra's own application: the search path plugin puts the user's directory first."""
    import os

    mine = user_conf(tmp_path / "mine")
    env = dict(os.environ, LEAKEXP_CONF=str(mine), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    proc = subprocess.run([sys.executable, "-m", "leakexp.cli.app", "--cfg", "job", *MINE, "corpus=toy_robust"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["corpus"] == {**yaml.safe_load((mine / "corpus" / "toy_robust.yaml").read_text())}
    proc = subprocess.run([sys.executable, "-m", "leakexp.cli.app", "--cfg", "job", *MINE],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and yaml.safe_load(proc.stdout)["corpus"]["name"] == "mycorpus", proc.stderr


def test_the_xdg_user_directory_is_read_where_it_exists(capsys, monkeypatch, tmp_path):
    user_conf(tmp_path / "xdg" / "leakexp" / "conf")
    rc, out, _ = leakexp(capsys, "grid", "--help")
    assert "mycorpus" in help_groups(out)["corpus"]


def test_a_missing_leakexp_conf_directory_is_a_config_error(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("LEAKEXP_CONF", str(tmp_path / "nowhere"))
    rc, _, err = leakexp(capsys, "status", f"store={tmp_path / 's'}")
    assert rc == 2 and "LEAKEXP_CONF=" in err and "no such directory" in err
