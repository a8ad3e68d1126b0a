import json

import numpy as np
import pandas as pd
import pytest

from leakexp.cli.main import main
from leakexp.toolkit.annotations import calibrate, cohen_kappa, detection_quality, kappa, read_annotations, stratified_sample, table2


def _rec(i, qid, topic, labels, sim=0.95):
    return {"id": i, "data": f"query {qid}", "label": labels, "title": "t", "topic": topic, "variant": "",
            "narrative": "", "description": "", "ms-marco-qid": qid, "cosine_similarity": sim}


def _write(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_calibration_finds_the_lowest_threshold_with_the_target_precision():
    # similarities and truth: above 0.9 all true but one; 0.85 false; 0.80 true
    judged = pd.DataFrame({"similarity": [0.99, 0.97, 0.95, 0.93, 0.91, 0.88, 0.85, 0.80],
                           "leak": [True, True, False, True, True, True, False, True]})
    t, curve = calibrate(judged, 0.8)
    # > 0.88-: 5 of 6 true = 0.833 >= 0.8; > 0.85-: 5/7 = 0.714; > 0.80-: 6/8 = 0.75 (one rounding step below: 1e-4)
    assert t == 0.8799
    row = curve.set_index("threshold").loc[0.8799]
    assert (row.kept, row.true) == (6, 5) and row.recall == pytest.approx(5 / 6)
    assert calibrate(judged, 0.99)[0] == 0.9699
    assert calibrate(judged.assign(leak=False), 0.9)[0] is None


def test_cohen_kappa_against_a_hand_computation():
    a = ["y", "y", "n", "n", "y", "n", "y", "y", "n", "y"]
    b = ["y", "n", "n", "n", "y", "y", "y", "y", "n", "y"]
    po = 8 / 10
    pe = (6 / 10) * (6 / 10) + (4 / 10) * (4 / 10)
    assert cohen_kappa(a, b) == pytest.approx((po - pe) / (1 - pe))
    assert cohen_kappa(a, a) == 1.0


def test_kappa_of_two_annotators_joins_on_query_and_topic(tmp_path):
    first = _write(tmp_path / "a.jsonl", [_rec(0, "1", "301", ["Title-Identical"]),
                                         _rec(1, "2", "301", ["Different Topic"]),
                                         _rec(2, "3", "302", ["Title-Specialization"]),
                                         _rec(3, "4", "302", ["Title-Generalization"])])
    second = _write(tmp_path / "b.jsonl", [_rec(10, "1", "301", ["Title-Identical"]),
                                          _rec(11, "2", "301", ["Title-Reformulation"]),
                                          _rec(12, "3", "302", ["Title-Specialization"]),
                                          _rec(13, "4", "302", ["Title-Specialization"])])
    k = kappa(read_annotations([first]), read_annotations([second]))
    assert k["candidates"] == 4
    assert k["kappa_leak"] == pytest.approx(cohen_kappa([1, 0, 1, 1], [1, 1, 1, 1]))
    assert k["kappa_type"] == pytest.approx(cohen_kappa(["I", "D", "S", "G"], ["I", "R", "S", "S"]))


def test_table2_counts_per_corpus_with_shared_topics(tmp_path):
    f = _write(tmp_path / "a.jsonl", [_rec(0, "1", "301", ["Title-Identical"]),
                                      _rec(1, "2", "301", ["Different Topic"]),
                                      _rec(2, "3", "302", ["Title-Specialization"]),
                                      _rec(3, "4", "900", ["Title-Identical"])])
    a, b = table2(read_annotations([f]), {"robust": ["301", "302"], "core": ["301", "900"]})
    a = a.set_index(["corpus", "candidates"])
    assert a.loc[("robust", "true")].tolist() == [2, 2] and a.loc[("robust", "false")].tolist() == [1, 1]
    assert a.loc[("core", "true")].tolist() == [2, 2] and a.loc[("core", "false")].tolist() == [1, 1]
    b = b.set_index("type")
    assert b.loc["Identical", "queries"] == 2 and b.loc["Different Topic", "queries"] == 1
    assert b.loc["Identical", "core"] == 2 and b.loc["Specialization", "robust"] == 1


def test_cli_table2_and_kappa_contract(tmp_path, capsys):
    f = _write(tmp_path / "a.jsonl", [_rec(0, "1", "301", ["Title-Identical"]),
                                      _rec(1, "2", "302", ["Different Topic"])])
    topics = tmp_path / "robust.txt"
    topics.write_text("301\n302\n")
    assert main(["annotations", "table2", "--annotations", str(f), "--corpus", f"robust04={topics}",
                 "--out", str(tmp_path / "out")]) == 0
    a = pd.read_csv(tmp_path / "out" / "table2a.csv", dtype={"candidates": str})
    assert a.columns.tolist() == ["corpus", "candidates", "queries", "topics"]
    assert a.values.tolist() == [["robust04", "true", 1, 1], ["robust04", "false", 1, 1]]
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {"table2a.md", "table2a.tex", "table2b.csv"}
    assert main(["annotations", "kappa", str(f), str(f)]) == 0
    assert "kappa_leak: 1.0000" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    assert main(["annotations", "kappa", str(bad), str(f)]) == 2
    assert "bad.jsonl:1: missing field(s)" in capsys.readouterr().err


def test_stratified_sample_draws_equally_from_similarity_bins():
    rng = np.random.default_rng(1)
    sims = np.concatenate([rng.uniform(0.8, 0.85, 500), rng.uniform(0.85, 1.0, 60)])
    pairs = pd.DataFrame({"similarity": sims, "train_qid": [str(i) for i in range(len(sims))], "topic_qid": "1"})
    s = stratified_sample(pairs, n=40, lower=0.8, bins=4)
    assert len(s) == 40 and (s.similarity > 0.8).all()
    assert (s.similarity > 0.85).sum() >= 25  # the sparse high bins are not drowned by the dense low one
    assert stratified_sample(pairs, n=40, lower=0.8, bins=4).equals(s)


def test_detection_quality_counts_planted_leaks_only():
    truth = pd.DataFrame({"train_qid": ["1", "2", "3"], "topic_qid": ["301"] * 3,
                          "type": ["Identical", "Reformulation", "Different Topic"]})
    pairs = pd.DataFrame({"train_qid": ["1", "3"], "topic_qid": ["301", "301"]})
    q = detection_quality(pairs, truth)
    assert (q["recall"], q["precision"]) == (0.5, 0.5)


def test_toy_detection_recovers_planted_leaks(small_run, small_cfg):
    from leakexp.lib.candidates import leak_pairs
    from leakexp.runner.stage import Ask

    r = small_run[0]
    truth = pd.read_csv(r.ensure(Ask.of("toy")) / "truth" / "leaks.tsv", sep="\t", dtype=str)
    q = detection_quality(leak_pairs(r.get(Ask.of("detect")), float(small_cfg.detect.threshold)), truth)
    assert q["recall"] > 0.8 and q["precision"] > 0.9


def test_cli_import_writes_verified_leaks_per_corpus(tmp_path, capsys):
    f = _write(tmp_path / "a.jsonl", [_rec(0, "1", "301", ["Title-Identical"]),
                                      _rec(1, "2", "302", ["Different Topic"]),
                                      _rec(2, "3", "900", ["Title-Reformulation"])])
    (tmp_path / "r.txt").write_text("301\n302\n")
    (tmp_path / "c.txt").write_text("301\n900\n")
    assert main(["annotations", "import", "--annotations", str(f), "--corpus", f"robust04={tmp_path / 'r.txt'}",
                 "--corpus", f"core18={tmp_path / 'c.txt'}", "--out", str(tmp_path / "v")]) == 0
    r = pd.read_csv(tmp_path / "v" / "verified-robust04.csv", dtype=str)
    c = pd.read_csv(tmp_path / "v" / "verified-core18.csv", dtype=str)
    assert r.train_qid.tolist() == ["1"] and sorted(c.train_qid) == ["1", "3"]
    assert "robust04: 1 verified leaking queries for 1 topics" in capsys.readouterr().out


def test_cli_review_exports_the_published_format(small_run, small_cfg, tmp_path):
    out = tmp_path / "review.jsonl"
    assert main(["annotations", "review", f"store={small_cfg.run.store}", "data.queries_per_source=600",
                 "--out", str(out), "--label-with-truth"]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) > 50 and set(recs[0]) == {"id", "data", "label", "title", "topic", "variant", "narrative",
                                               "description", "ms-marco-qid", "cosine_similarity"}
    per_topic = pd.Series([r["topic"] for r in recs]).value_counts()
    assert per_topic.max() <= small_cfg.verify.review_top_k
    assert min(r["cosine_similarity"] for r in recs) > small_cfg.detect.threshold
    ann = read_annotations([out])  # labelled by the toy truth, it imports like any annotation file
    assert ann.leak.mean() > 0.9


def test_kappa_labels_compares_sorted_label_lists_position_by_position(tmp_path):
    first = _write(tmp_path / "a.jsonl", [_rec(0, "1", "301", ["Title-Identical", "Variant-Identical"]),
                                         _rec(1, "2", "301", ["Title-Specialization"]),
                                         _rec(2, "3", "302", ["Different Topic"])])
    second = _write(tmp_path / "b.jsonl", [_rec(0, "1", "301", ["Variant-Identical", "Title-Identical"]),
                                          _rec(1, "2", "301", ["Title-Specialization", "Variant-Generalization"]),
                                          _rec(2, "3", "302", ["Title-Reformulation"])])
    k = kappa(read_annotations([first]), read_annotations([second]))
    # positions (sorted lists, the shorter padded with "(none)"):
    #   (TI, TI), (VI, VI) | (TS, TS), ((none), VG) | (DT, TR)  -> 5 ratings, 3 agree: po = 3/5
    #   marginals a: TI VI TS (none) DT, b: TI VI TS VG TR, 1/5 each -> pe = 3 * (1/5 * 1/5) = 3/25
    #   kappa = (3/5 - 3/25) / (1 - 3/25) = 12/22 = 6/11
    assert k["label_positions"] == 5
    assert k["kappa_labels"] == pytest.approx(6 / 11)
    # leak: (T, T), (T, T), (F, T): po = 2/3, pe = 2/3 * 1 + 1/3 * 0 = 2/3 -> 0
    assert k["kappa_leak"] == pytest.approx(0.0)
    # type: (I, I), (S, S), (DT, R): po = 2/3, pe = 1/9 + 1/9 = 2/9 -> (2/3 - 2/9) / (7/9) = 4/7
    assert k["kappa_type"] == pytest.approx(4 / 7)


def test_cli_kappa_prints_three_lines(tmp_path, capsys):
    first = _write(tmp_path / "a.jsonl", [_rec(0, "1", "301", ["Title-Identical", "Variant-Identical"]),
                                         _rec(1, "2", "302", ["Different Topic"])])
    second = _write(tmp_path / "b.jsonl", [_rec(0, "1", "301", ["Title-Identical"]),
                                          _rec(1, "2", "302", ["Different Topic"])])
    assert main(["annotations", "kappa", str(first), str(second)]) == 0
    out = capsys.readouterr().out.splitlines()
    # positions: (TI, TI), (VI, (none)), (DT, DT): po = 2/3; pe = 1/9 + 1/9 = 2/9 -> 4/7
    assert out == ["candidates: 2", "kappa_leak: 1.0000", "kappa_type: 1.0000", f"kappa_labels: {4 / 7:.4f}"]


def test_cli_table2_on_an_empty_or_binary_file_is_a_one_line_error(tmp_path, capsys):
    topics = tmp_path / "robust.txt"
    topics.write_text("301\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    binary = tmp_path / "labels.jsonl.gz"
    binary.write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(256)))
    for bad, message in ((empty, "holds no annotations (the file is empty)"), (binary, "is gzip-compressed")):
        assert main(["annotations", "table2", "--annotations", str(bad), "--corpus", f"robust04={topics}",
                     "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(bad) in err and message in err
    assert not (tmp_path / "out").exists()
