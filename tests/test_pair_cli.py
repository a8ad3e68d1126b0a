"""The pair commands (audit, decontaminate, resample, split-eval) as a user meets them: defaults for real data
from the source documents, validated options, accepted run formats, help texts, degenerate cases named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from leakexp.toolkit import audit as A
from leakexp.toolkit import resample as R
from leakexp.cli.main import main

TEXTS = {"hubble telescope": 0, "fish recipes": 1, "cars": 2, "hubble telescopes": 0, "jazz": 3}


class Recorder:
    """Stands in for SbertEmbedder: records the model it was given, embeds by a fixed table."""

    models: list[str] = []

    def __init__(self, store, sbert, batch_size=256):
        Recorder.models.append(sbert)

    def __call__(self, texts, name):
        x = np.zeros((len(texts), 4), dtype=np.float32)
        for i, t in enumerate(texts):
            x[i, TEXTS[t]] = 1.0
        return x



@pytest.fixture(autouse=True)
def _study_model_in_the_cache(tmp_path_factory, monkeypatch):
    """A hub cache holding the seeds' SBERT model (config and weights as the loaders find them): these tests check
    the commands past their model check, with an embedder stand-in where they embed."""
    from test_hub import fake_cache

    from leakexp.toolkit.audit import PAPER_DEFAULTS

    cache = tmp_path_factory.mktemp("hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(fake_cache(cache, str(PAPER_DEFAULTS["sbert"]))))

@pytest.fixture
def pair(tmp_path, monkeypatch):
    monkeypatch.setattr(A, "SbertEmbedder", Recorder)
    monkeypatch.setattr(R, "SbertEmbedder", Recorder)
    Recorder.models = []
    (tmp_path / "train.tsv").write_text("a\thubble telescopes\nb\tfish recipes\nc\tjazz\n")
    (tmp_path / "dev.tsv").write_text("q1\thubble telescope\nq2\tcars\n")
    (tmp_path / "train.qrels").write_text("a 0 D1 1\nb 0 D2 1\nc 0 D4 1\n")
    (tmp_path / "dev.qrels").write_text("q1 0 D1 1\nq2 0 D3 1\n")
    (tmp_path / "empty.qrels").write_text("")
    return tmp_path


def _audit(d, *extra):
    overrides = [e for e in extra if "=" in e and not e.startswith("-")]
    options = [e for e in extra if e not in overrides]
    return main(["audit", f"store={d / 's'}", *overrides, "--train", str(d / "train.tsv"), "--test",
                 str(d / "dev.tsv"), "--out", str(d / "o"), *options])


def test_real_data_takes_the_studys_detection_defaults_not_the_demos(pair, capsys):
    assert _audit(pair) == 0
    out = capsys.readouterr().out
    options = json.loads((pair / "o" / "audit.json").read_text())["options"]
    assert Recorder.models == ["sentence-transformers/paraphrase-MiniLM-L6-v2@c9a2bfebc254878aee8c3aca9e6844d5bbb102d1"]
    assert (options["threshold"], options["k"]) == (0.91, 100)
    assert "Fröbe et al. 2022" in out  # the printed defaults say where they come from
    assert _audit(pair, "experiment=demo") == 0  # the demo's values only when asked for
    options = json.loads((pair / "o" / "audit.json").read_text())["options"]
    assert Recorder.models[-1] == "bundled" and options["threshold"] == 0.8
    assert _audit(pair, "detect.threshold=0.85", "--k", "7") == 0
    options = json.loads((pair / "o" / "audit.json").read_text())["options"]
    assert (options["threshold"], options["k"]) == (0.85, 7)


@pytest.mark.parametrize("args, message", [
    (["--k", "0"], "--k 0: give a number of neighbours >= 1"),
    (["--threshold", "1.5"], "--threshold 1.5: a cosine similarity lies in [-1, 1]"),
])
def test_bad_numbers_are_one_line_errors(pair, capsys, args, message):
    assert _audit(pair, *args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_resttest_validates_buckets_and_lists_only_its_options(pair, capsys):
    rc = main(["resample", "resttest", "--train", str(pair / "train.tsv"), "--train-qrels", str(pair / "train.qrels"),
               "--test", str(pair / "dev.tsv"), "--out", str(pair / "r"), "--buckets", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and "--buckets 0: ReSTTest needs K >= 2 buckets" in err and "Traceback" not in err
    with pytest.raises(SystemExit):
        main(["resample", "resttest", "--help"])
    text = capsys.readouterr().out
    for ignored in ("--threshold", "--k ", "--train-rel", "--test-rel", "--ngrams", "--sizes"):
        assert ignored not in text, ignored
    assert "--buckets" in text and "--seed" in text


def test_help_texts_say_what_each_figure_counts(capsys):
    for command, phrases in ((["audit"], ["query_overlap", "exact_duplicates", "label_overlap", "Fröbe et al. 2022"]),
                             (["decontaminate"], ["exact duplicate", "test queries matched"]),
                             (["resample", "restrain"], ["--size-unit", "qrels lines"]),
                             (["split-eval"], ["paired t-test", "nothing to compare"])):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for p in phrases:
            assert p in text, (command, p)


def test_empty_qrels_errors_name_the_empty_file(pair, capsys):
    rc = main(["audit", "--train-qrels", str(pair / "empty.qrels"), "--test-qrels", str(pair / "dev.qrels"),
               "--out", str(pair / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and f"--train-qrels {pair / 'empty.qrels'}: no qrels lines" in err
    rc = main(["resample", "resttest", "--train", str(pair / "train.tsv"), "--train-qrels", str(pair / "empty.qrels"),
               "--test", str(pair / "dev.tsv"), "--out", str(pair / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and f"--train-qrels {pair / 'empty.qrels'}: no qrels lines" in err
    assert _audit(pair, "--train-qrels", str(pair / "train.qrels"), "--test-qrels", str(pair / "dev.qrels")) == 0
    (pair / "a.run").write_text("q1 Q0 D1 1 3 t\nq2 Q0 D3 1 3 t\n")
    rc = main(["split-eval", str(pair / "a.run"), "--qrels", str(pair / "empty.qrels"), "--audit", str(pair / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and f"--qrels {pair / 'empty.qrels'}: no qrels lines" in err


def test_split_eval_accepts_ms_marco_runs_and_names_nothing_to_compare(pair, capsys):
    assert _audit(pair, "--train-qrels", str(pair / "train.qrels"), "--test-qrels", str(pair / "dev.qrels"),
                  "--threshold", "0.95") == 0
    capsys.readouterr()
    # MS MARCO's run format: qid TAB docid TAB rank
    (pair / "m.tsv").write_text("q1\tD1\t1\nq1\tX\t2\nq2\tX\t1\nq2\tD3\t2\n")
    (pair / "t.run").write_text("q1 Q0 X 1 9 t\nq1 Q0 D1 2 8 t\nq2 Q0 D3 1 9 t\n")
    rc = main(["split-eval", f"M={pair / 'm.tsv'}", f"T={pair / 't.run'}", "--qrels", str(pair / "dev.qrels"),
               "--audit", str(pair / "o"), "--measures", "P@1", "--out", str(pair / "se")])
    out = capsys.readouterr().out
    assert rc == 0
    import pandas as pd

    t = pd.read_csv(pair / "se" / "split_eval.csv").set_index(["run", "group"])
    assert t.loc[("M", "leaked"), "mean"] == 1.0 and t.loc[("M", "other"), "mean"] == 0.0  # rank order kept
    assert t.loc[("T", "leaked"), "mean"] == 0.0 and t.loc[("T", "other"), "mean"] == 1.0
    assert np.isnan(t.loc[("T", "leaked"), "p"])  # one leaked query: no test, not p = 1.0
    assert "1 leaked" in out
    # nothing leaked by exact duplicate: say so instead of p = 1.0 over 0 queries
    rc = main(["split-eval", f"M={pair / 'm.tsv'}", "--qrels", str(pair / "dev.qrels"), "--audit", str(pair / "o"),
               "--leaked-by", "exact", "--measures", "P@1"])
    captured = capsys.readouterr()
    assert rc == 1 and "nothing to compare" in captured.err and "no leaked test query (exact)" in captured.err
    assert "p = 1.0" not in captured.out


def test_restrain_sizes_in_queries_or_qrels_lines(tmp_path):
    from tests.test_resample import restrain_sides

    train, test, emb = restrain_sides()
    extra = train.qrels[train.qrels.qid.isin(["r1", "r4"])].assign(docno=lambda d: d.docno + "b")
    train.qrels = __import__("pandas").concat([train.qrels, extra], ignore_index=True)  # r1, r4: 2 qrels lines
    table = R.restrain(train, test, emb, tmp_path / "q", sizes=[2], threshold=0.5, k=1, seed=7, unit="qrels")
    row = table.set_index("kind").loc["interpolate"]
    assert (row["queries"], row["qrels"]) == (1, 2)  # r1 alone fills 2 qrels lines
    table = R.restrain(train, test, emb, tmp_path / "l", sizes=[3], threshold=0.5, k=1, seed=7, unit="qrels")
    row = table.set_index("kind").loc["interpolate"]
    assert (row["queries"], row["qrels"]) == (2, 4)  # the shortest prefix with at least 3 lines: r1 (2) + r4 (2)
    summary = (tmp_path / "l" / "restrain" / "summary.md").read_text()
    assert "qrels lines" in summary
    with pytest.raises(ValueError, match="unit"):
        R.restrain(train, test, emb, tmp_path / "x", sizes=[2], threshold=0.5, unit="docs")
