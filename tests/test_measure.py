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
        elif key == "baseline":  # the comparison of the runs follows
            current = None
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
                                   "evaluate.no_relevant=skip; depth: the whole run; topics: every judged topic (-c: "
                                   "without a run line it counts as 0, MFR as a miss)")
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


# -- as trec_eval and ir_measures are used ------------------------------------------------------------------------
def _measure(files, *argv) -> tuple[int, str, str]:
    """``leakexp measure`` in-process on the fixture's files: (rc, stdout, stderr)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(["measure", *argv, f"store={files / 'store'}"])
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def test_measures_are_named_as_ir_measures_names_them(files):
    rc, out, err = _measure(files, str(files / "a.run"), "--qrels", str(files / "qrels.txt"), "-m", "RR", "P@1",
                            "nDCG@10", "MFR", "P(rel=2)@1")
    assert rc == 0, err
    # RR: q1 first relevant at rank 2 (the tie with a goes to a), q2 at 1, q3 none retrieved
    ndcg1 = (1 / math.log2(3) * 2 + 1 / math.log2(4)) / (2 + 1 / math.log2(3))
    assert _lines(out)["a"] == ["RR: 0.5000", "P@1: 0.3333", f"nDCG@10: {(ndcg1 + 1) / 3:.4f}",
                                f"MFR: {3 / (1 / 2 + 1 + 0):.4f}", "P(rel=2)@1: 0.0000"]


@pytest.mark.parametrize("name, hint", [("Foo@3", "'Foo@3'"), ("ndcg@10", "did you mean nDCG@10"),
                                        ("MFR@10", "--depth")])
def test_an_unknown_measure_is_one_line_naming_it(files, name, hint):
    rc, out, err = _measure(files, str(files / "a.run"), "--qrels", str(files / "qrels.txt"), "-m", "P@1", name)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "-m" in lines[0] and hint in lines[0], err
    assert out == ""


def test_per_topic_lines_as_trec_eval_q(files):
    rc, out, err = _measure(files, str(files / "a.run"), "--qrels", str(files / "qrels.txt"), "-q", "-m", "RR", "P@1")
    assert rc == 0, err
    rows = [line.split("\t") for line in out.splitlines() if line.count("\t") == 2]
    assert rows == [["RR", "q1", "0.5000"], ["P@1", "q1", "0.0000"], ["RR", "q2", "1.0000"], ["P@1", "q2", "1.0000"],
                    ["RR", "q3", "0.0000"], ["P@1", "q3", "0.0000"], ["RR", "all", "0.5000"], ["P@1", "all", "0.3333"]]
    assert "RR: " not in out  # the means are the `all` rows


def test_judged_topics_without_a_run_line_count_as_zero_or_are_left_out(files):
    """q5 is judged relevant and absent from the run: counted as 0 (MFR: a miss) by default and with -c, as trec_eval
    -c does; left out with --run-topics, as trec_eval without -c. The run's topic q9 has no judgment: ignored."""
    (files / "qrels5.txt").write_text(QRELS + "q5 0 v 1\n")
    (files / "b.run").write_text(TREC + "q9 Q0 k 1 1.0 t\n")
    qrels = ["--qrels", str(files / "qrels5.txt"), "-m", "RR", "MFR"]
    for flag in ([], ["-c"]):
        rc, out, err = _measure(files, str(files / "b.run"), *qrels, *flag)
        assert rc == 0, err
        assert _lines(out)["b"] == ["RR: 0.3750", f"MFR: {4 / 1.5:.4f}"]  # (0.5 + 1 + 0 + 0) / 4
        run_line = next(line for line in out.splitlines() if line.startswith("run: "))
        assert run_line == ("run: b (4 topics; 1 judged topic without a run line counted as 0, MFR a miss: q5; "
                            "1 run topic without judgments ignored: q9)")
    rc, out, err = _measure(files, str(files / "b.run"), *qrels, "--run-topics")
    assert rc == 0, err
    assert _lines(out)["b"] == ["RR: 0.5000", "MFR: 2.0000"]  # (0.5 + 1 + 0) / 3; 3 / (1/2 + 1 + 0)
    run_line = next(line for line in out.splitlines() if line.startswith("run: "))
    assert run_line == ("run: b (3 topics; 1 judged topic without a run line left out: q5; "
                        "1 run topic without judgments ignored: q9)")


def test_the_whole_run_is_scored_unless_a_depth_is_given(files):
    """The relevant document at rank 22: found in the whole run (the demo configuration re-ranks 20, which no longer
    cuts a run), missed at --depth 20; ties still fall to the smaller docno."""
    docs = [f"d{i:02d}" for i in range(30)]
    (files / "deep.run").write_text("".join(f"t1 Q0 {d} {i + 1} {30 - i} x\n" for i, d in enumerate(docs)))
    (files / "deep.qrels").write_text("t1 0 d21 1\n")
    args = [str(files / "deep.run"), "--qrels", str(files / "deep.qrels"), "-m", "RR", "MFR", "R@100"]
    rc, out, err = _measure(files, *args)
    assert rc == 0, err
    assert _lines(out)["deep"] == [f"RR: {1 / 22:.4f}", "MFR: 22.0000", "R@100: 1.0000"]
    assert "depth: the whole run" in out.splitlines()[0]
    rc, out, err = _measure(files, *args, "--depth", "20")
    assert rc == 0, err
    assert _lines(out)["deep"] == ["RR: 0.0000", "MFR: inf", "R@100: 0.0000"]
    assert "depth: 20" in out.splitlines()[0]
    rc, out, err = _measure(files, *args, "--depth", "0")
    assert rc == 2 and "--depth" in err


def _comparison(out: str) -> dict[tuple[str, str], list[str]]:
    """(run, measure) -> the comparison table's remaining cells."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) > 2 and not set(cells[0]) <= set(":-") and cells[0] != "run":
            rows[(cells[0], cells[1])] = cells[2:]
    return rows


def test_two_runs_and_more_are_compared_with_paired_t_tests_and_bonferroni(tmp_path):
    """Reciprocal ranks per topic: A .5 1 .5 1 .5, B 1 1 1 1 1, C 1 .5 .5 .5 .5; each run is tested against the first
    (paired Student's t-test), Bonferroni over the two compared runs; MFR's test pairs the reciprocal ranks."""
    from scipy import stats

    topics = ["t1", "t2", "t3", "t4", "t5"]
    (tmp_path / "q.txt").write_text("".join(f"{t} 0 r{t} 1\n{t} 0 n{t} 0\n" for t in topics))
    first = {"A": [2, 1, 2, 1, 2], "B": [1, 1, 1, 1, 1], "C": [1, 2, 2, 2, 2]}  # rank of the relevant document
    for name, ranks in first.items():
        lines = []
        for t, rank in zip(topics, ranks):
            order = [f"r{t}", f"n{t}"] if rank == 1 else [f"n{t}", f"r{t}"]
            lines += [f"{t} Q0 {d} {i + 1} {2 - i} {name}\n" for i, d in enumerate(order)]
        (tmp_path / f"{name}.run").write_text("".join(lines))
    runs = [f"{n}={tmp_path / f'{n}.run'}" for n in first]
    rc, out, err = _measure(tmp_path, *runs, "--qrels", str(tmp_path / "q.txt"), "-m", "RR", "MFR")
    assert rc == 0, err
    assert "baseline: A (the first run given)" in out.splitlines()

    def expected(run: str) -> tuple[float, float]:
        d = [1 / b - 1 / a for a, b in zip(first["A"], first[run])]
        mean = sum(d) / len(d)
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
        p = 2 * stats.t.sf(abs(mean / (sd / math.sqrt(len(d)))), len(d) - 1)
        return mean, p

    table = _comparison(out)
    assert set(table) == {("B", "RR"), ("B", "MFR"), ("C", "RR"), ("C", "MFR")}
    for run in ("B", "C"):
        delta, p = expected(run)
        topics_, mean, base, diff, p_raw, p_bonf, significant = table[(run, "RR")]
        assert (topics_, base) == ("5", "0.7000") and float(diff) == pytest.approx(delta, abs=5e-5)
        assert float(p_raw) == pytest.approx(p, abs=5e-5) and float(p_bonf) == pytest.approx(min(1, 2 * p), abs=5e-5)
        assert significant == ("yes" if 2 * p < 0.05 else "no")
        assert table[(run, "MFR")][4:6] == [p_raw, p_bonf]  # the same test: reciprocal ranks
    rc, out, err = _measure(tmp_path, *runs, "--qrels", str(tmp_path / "q.txt"), "-m", "RR", "--baseline", "C")
    assert rc == 0, err
    assert "baseline: C (--baseline)" in out.splitlines() and set(_comparison(out)) == {("A", "RR"), ("B", "RR")}
    rc, out, err = _measure(tmp_path, *runs, "--qrels", str(tmp_path / "q.txt"), "--baseline", "D")
    assert rc == 2 and "--baseline D" in err and "A, B, C" in err


@pytest.mark.parametrize("case", ["run of another collection", "qrels of another collection", "one of two runs",
                                  "no relevant judgment"])
def test_a_run_that_matches_no_judged_topic_is_an_error_naming_both_files(files, case):
    (files / "other.run").write_text("x1 Q0 a 1 3.0 t\nx2 Q0 b 1 2.0 t\n")
    (files / "other-qrels.txt").write_text("x1 0 a 1\nx2 0 b 0\n")
    (files / "zero-qrels.txt").write_text("q1 0 a 0\nq2 0 x 0\n")
    runs, qrels = {"run of another collection": ([files / "other.run"], files / "qrels.txt"),
                   "qrels of another collection": ([files / "a.run"], files / "other-qrels.txt"),
                   "one of two runs": ([files / "a.run", files / "other.run"], files / "qrels.txt"),
                   "no relevant judgment": ([files / "a.run"], files / "zero-qrels.txt")}[case]
    rc, out, err = _measure(files, *map(str, runs), "--qrels", str(qrels))
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert str(runs[-1]) in lines[0] and str(qrels) in lines[0]
    assert ("no judged topic has a relevant judgment" if case == "no relevant judgment" else "no topic") in lines[0]
    assert out == ""


def test_overrides_measure_does_not_read_are_refused(files):
    rc, out, err = _measure(files, str(files / "a.run"), "--qrels", str(files / "qrels.txt"), "rerank.depth=5")
    assert rc == 2 and "rerank.depth" in err and "--depth 5" in err and len(err.strip().splitlines()) == 1
    rc, out, err = _measure(files, str(files / "a.run"), "--qrels", str(files / "qrels.txt"), "model=duet")
    assert rc == 2 and "model=duet" in err and len(err.strip().splitlines()) == 1
    for override, says in (("evaluate.mfr=foo", "evaluate.mfr: input should be"), ("evaluate.folds=1", "evaluate.folds"),
                           ("evalute.mfr=arithmetic", "did you mean evaluate.mfr=arithmetic"),
                           ("evaluate.measures=[nDCG@10,Bogus]", "evaluate.measures: cannot parse 'Bogus'")):
        rc, out, err = _measure(files, str(files / "a.run"), "--qrels", str(files / "qrels.txt"), override)
        assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, (override, err)


def test_measure_starts_without_torch(files):
    """The measure path imports neither torch nor transformers (nor the grid's stages): it starts as trec_eval does,
    also with a configuration override and with two runs compared."""
    import subprocess
    import sys

    code = ("import sys; from leakexp.cli.main import main\n"
            f"rc = main(sys.argv[1:])\n"
            "heavy = sorted(m for m in ('torch', 'transformers', 'leakexp.runner.registry', 'leakexp.models') "
            "if m in sys.modules)\n"
            "print('rc', rc, 'heavy', heavy)\n")
    for extra in ([], ["experiment=paper", "evaluate.mfr=arithmetic", "evaluate.mfr_missing=skip"],
                  [f"b={files / 'b.tsv.gz'}"]):
        argv = ["measure", str(files / "a.run"), "--qrels", str(files / "qrels.txt"), *extra,
                f"store={files / 'store'}"]
        proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
        assert proc.stdout.strip().splitlines()[-1] == "rc 0 heavy []", proc.stdout + proc.stderr


def test_runs_and_overrides_after_the_measures_are_still_runs_and_overrides(files):
    """``-m`` takes every word up to the next option, as trec_eval users write it: ``-m nDCG@10 P@1 run --qrels q``."""
    rc, out, err = _measure(files, "-m", "RR", "MFR", str(files / "a.run"), "evaluate.mfr=arithmetic",
                            "evaluate.mfr_missing=skip", "--qrels", str(files / "qrels.txt"))
    assert rc == 0, err
    assert _lines(out)["a"] == ["RR: 0.5000", "MFR: 1.5000"]  # (2 + 1) / 2, q3's miss left out
