"""``leakexp measure``: any run scored as the paper's tables score it, under the configuration's settings."""

from __future__ import annotations

import gzip
import math

import pandas as pd
import pytest

from leakexp.cli.main import main

QRELS = "q1 0 a 0\nq1 0 b 2\nq1 0 c 1\nq2 0 x 1\nq3 0 w 1\nq4 0 n 0\n"  # q4: no relevant judgment
# q1: first relevant at rank 2 (b ties a at 3.0 and loses to it by docno); q2: rank 1; q3: w not retrieved
TREC = "q1 Q0 a 1 3.0 t\nq1 Q0 b 2 3.0 t\nq1 Q0 c 3 1.0 t\nq2 Q0 x 1 5.0 t\nq2 Q0 y 2 1.0 t\nq3 Q0 z 1 1.0 t\n"
MSMARCO = "q1\ta\t1\nq1\tb\t2\nq1\tc\t3\nq2\tx\t1\nq2\ty\t2\nq3\tz\t1\n"


def _lines(out: str) -> dict[str, list[str]]:
    """run name -> its `measure: value` lines."""
    runs, current = {}, None
    for line in out.splitlines():
        key, _, value = line.partition(": ")
        if key == "run":
            current = runs.setdefault(value.split(" (")[0], [])
        elif current is not None and key != "note" and key != "per topic":
            current.append(line)
    return runs


@pytest.fixture
def files(tmp_path):
    (tmp_path / "qrels.txt").write_text(QRELS)
    (tmp_path / "a.run").write_text(TREC)
    with gzip.open(tmp_path / "b.tsv.gz", "wt") as f:
        f.write(MSMARCO)
    return tmp_path


def test_trec_and_gzipped_msmarco_runs_score_the_same_by_hand(files, capsys):
    store = f"store={files / 'store'}"
    assert main(["measure", str(files / "a.run"), str(files / "b.tsv.gz"), "--qrels", str(files / "qrels.txt"), store,
                 "experiment=paper"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == ("settings: evaluate.mfr=reciprocal_of_mrr evaluate.mfr_missing=infinite "
                                   "evaluate.no_relevant=skip rerank.depth=100")
    ndcg1 = (1 / math.log2(3) * 2 + 1 / math.log2(4)) / (2 + 1 / math.log2(3))  # labels 0, 2, 1 against 2, 1
    expected = [f"nDCG@10: {(ndcg1 + 1 + 0) / 3:.4f}", "P@1: 0.3333", f"MFR: {3 / (1 / 2 + 1 + 0):.4f}"]
    assert _lines(out) == {"a": expected, "b": expected}  # q4 (no relevant judgment) left out
    assert "note: 1 topic without relevant judgments left out (q4)" in out


def test_overrides_anywhere_choose_the_definition_and_out_writes_per_topic_values(files, capsys):
    out_csv = files / "per-topic.csv"
    assert main(["measure", "evaluate.mfr=arithmetic", f"mine={files / 'a.run'}", "--qrels", str(files / "qrels.txt"),
                 "evaluate.mfr_missing=skip", "experiment=paper", f"store={files / 'store'}", "--out",
                 str(out_csv)]) == 0
    lines = _lines(capsys.readouterr().out)
    assert lines["mine"][2] == "MFR: 1.5000"  # (2 + 1) / 2, q3 left out
    per = pd.read_csv(out_csv, dtype={"qid": str})
    assert list(per.columns) == ["run", "qid", "measure", "value"] and set(per.run) == {"mine"}
    mfr = per[per.measure == "MFR"].set_index("qid").value
    assert mfr["q1"] == 2.0 and mfr["q2"] == 1.0 and math.isnan(mfr["q3"])


def test_the_authors_bm25_runs_give_the_papers_mfr_range(capsys, tmp_path):
    """The runs the paper's models re-rank: 1/MRR 1.425 and 1.432 (a miss at reciprocal rank 0), arithmetic 4.66."""
    for corpus, mfr, ndcg, p1 in (("core17", "1.4249", "0.4095", "0.6000"), ("core18", "1.4323", "0.3997", "0.5800")):
        assert main(["measure", f"bundled:{corpus}.bm25-anserini.top100.run.gz", "--qrels",
                     f"bundled:qrels.{corpus}.txt.gz", "experiment=paper", f"store={tmp_path}"]) == 0
        assert _lines(capsys.readouterr().out) == {
            f"{corpus}.bm25-anserini.top100": [f"nDCG@10: {ndcg}", f"P@1: {p1}", f"MFR: {mfr}"]}
    assert main(["measure", "bundled:core17.bm25-anserini.top100.run.gz", "--qrels", "bundled:qrels.core17.txt.gz",
                 "experiment=paper", "evaluate.mfr=arithmetic", "evaluate.mfr_missing=skip", f"store={tmp_path}"]) == 0
    assert _lines(capsys.readouterr().out)["core17.bm25-anserini.top100"][2] == "MFR: 4.6600"


@pytest.mark.parametrize("case", ["missing run", "bad line", "missing qrels", "empty qrels", "infinite mean",
                                  "same name", "no run"])
def test_bad_input_is_one_line_and_writes_nothing(case, files, capsys):
    (files / "bad.run").write_text("q1 Q0 a 1 3.0\n")
    (files / "empty.txt").write_text("")
    qrels, runs, extra = str(files / "qrels.txt"), [str(files / "a.run")], []
    expect = {"missing run": "none.run: no such file", "bad line": "bad.run:1: expected 6 fields",
              "missing qrels": "--qrels", "empty qrels": "no qrels lines",
              "infinite mean": "makes an arithmetic MFR infinite", "same name": "two runs are named 'a'",
              "no run": "give at least one run file"}[case]
    if case == "missing run":
        runs = [str(files / "none.run")]
    elif case == "bad line":
        runs.append(str(files / "bad.run"))
    elif case == "missing qrels":
        qrels = str(files / "none-qrels.txt")
    elif case == "empty qrels":
        qrels = str(files / "empty.txt")
    elif case == "infinite mean":
        extra = ["evaluate.mfr=arithmetic", "evaluate.mfr_missing=infinite"]
    elif case == "same name":
        runs.append(f"a={files / 'b.tsv.gz'}")
    elif case == "no run":
        runs = []
        extra = ["experiment=paper"]
    out_csv = files / "out.csv"
    code = main(["measure", *runs, "--qrels", qrels, f"store={files / 'store'}", *extra, "--out", str(out_csv)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and expect in err[0], err
    assert not out_csv.exists()
