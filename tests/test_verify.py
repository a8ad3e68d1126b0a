import json

import pandas as pd
import pytest

from leakexp.data.files import DataFormatError
from leakexp.toolkit.annotations import read_annotations, review_candidates, verified_leaks


def _rec(i, qid, topic, labels, text="lyme disease"):
    return {"id": i, "data": text, "label": labels, "title": "Lyme disease", "topic": topic, "variant": "",
            "narrative": "", "description": "", "ms-marco-qid": qid, "cosine_similarity": 0.95}


def _write(path, recs, extra=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs) + extra)
    return path


def test_import_marks_leaks_and_types_across_files(tmp_path):
    a = _write(tmp_path / "a.jsonl", [_rec(0, "11", "441", ["Title-Identical"]),
                                      _rec(1, "12", "441", ["Title-Specialization", "Variant-Identical"])])
    b = _write(tmp_path / "b.jsonl", [_rec(2, "13", "301", ["Different Topic"]),
                                      _rec(3, "14", "301", ["Title-Reformulation"])])
    ann = read_annotations([a, b])
    assert ann.leak.tolist() == [True, True, False, True]
    assert ann.type.tolist() == ["Identical", "Specialization", "Different Topic", "Reformulation"]
    # Core tracks reuse Robust04 topics: one annotation counts for every corpus with its topic
    robust = verified_leaks(ann, ["301", "441"])
    core = verified_leaks(ann, ["441", "900"])
    assert sorted(robust.train_qid) == ["11", "12", "14"]
    assert sorted(core.train_qid) == ["11", "12"]


def test_malformed_line_fails_with_file_and_line(tmp_path):
    f = _write(tmp_path / "a.jsonl", [_rec(0, "11", "441", ["Title-Identical"])], extra="{not json\n")
    with pytest.raises(DataFormatError, match=r"a.jsonl:2: not valid JSON"):
        read_annotations([f])
    g = _write(tmp_path / "g.jsonl", [_rec(0, "11", "441", ["Title-Similar"])])
    with pytest.raises(DataFormatError, match=r"g.jsonl:1: unknown label"):
        read_annotations([g])
    h = _write(tmp_path / "h.jsonl", [_rec(0, "11", "441", ["Title-Identical"])])
    with pytest.raises(DataFormatError, match=r"h.jsonl:1: id 0 is candidate \(ms-marco-qid 11, topic 441\) here but "
                                              r"\(ms-marco-qid 9, topic 441\) in .*first.jsonl:1"):
        read_annotations([_write(tmp_path / "first.jsonl", [_rec(0, "9", "441", ["Title-Identical"])]), h])


def test_review_takes_top_k_per_topic():
    pairs = pd.DataFrame({"topic_qid": ["1"] * 4 + ["2"], "train_qid": list("abcde"),
                          "similarity": [0.92, 0.99, 0.95, 0.93, 0.97]})
    r = review_candidates(pairs, 2)
    assert list(zip(r.topic_qid, r.train_qid)) == [("1", "b"), ("1", "c"), ("2", "e")]


def test_one_id_with_two_label_sets_is_an_error_naming_both_places(tmp_path):
    a = _write(tmp_path / "maik.jsonl", [_rec(7, "11", "441", ["Title-Identical", "Variant-Identical"]),
                                         _rec(8, "12", "441", ["Title-Reformulation"])])
    same = _write(tmp_path / "copy.jsonl", [_rec(7, "11", "441", ["Variant-Identical", "Title-Identical"])])
    ann = read_annotations([a, same])  # the same candidate with the same labels (any order) is read once
    assert ann.id.tolist() == [7, 8] and ann.file.tolist() == [a.name] * 2  # the name: no folder in an artifact
    b = _write(tmp_path / "cakiki.jsonl", [_rec(7, "11", "441", ["Title-Identical", "Variant-Identical"]),
                                           _rec(8, "12", "441", ["Title-Specialization"])])
    with pytest.raises(DataFormatError, match=r"cakiki.jsonl:2: id 8 is labelled \['Title-Specialization'\] here but "
                                              r"\['Title-Reformulation'\] in .*maik.jsonl:2: two label sets"):
        read_annotations([a, b])
    other = _write(tmp_path / "other.jsonl", [_rec(8, "99", "441", ["Title-Reformulation"])])
    with pytest.raises(DataFormatError, match=r"other.jsonl:1: id 8 is candidate \(ms-marco-qid 99, topic 441\) here"):
        read_annotations([a, other])


def test_empty_binary_and_non_utf8_annotation_files_are_one_line_errors(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataFormatError, match=r"empty.jsonl: holds no annotations \(the file is empty\)"):
        read_annotations([empty])
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n")
    with pytest.raises(DataFormatError, match="blank.jsonl: holds no annotations"):
        read_annotations([_write(tmp_path / "ok.jsonl", [_rec(0, "11", "441", ["Title-Identical"])]), blank])
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(json.dumps(_rec(0, "11", "441", ["Title-Identical"], text="caf\u00e9"),
                                  ensure_ascii=False).encode("latin-1") + b"\n")
    with pytest.raises(DataFormatError, match=r"latin1.jsonl: not UTF-8 text \(byte 0xe9 at offset \d+\)") as err:
        read_annotations([latin1])
    assert "\n" not in str(err.value)
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"PK\x00\x00\x01\x02")
    with pytest.raises(DataFormatError, match="model.bin: is a binary file"):
        read_annotations([binary])
    with pytest.raises(DataFormatError, match=r"is a folder"):
        read_annotations([tmp_path])


def test_an_unannotated_candidate_file_points_to_the_annotated_ones(tmp_path):
    f = tmp_path / "iteration-01.jsonl"
    f.write_text(json.dumps({"topic": "301", "title": "t", "text": "q", "ms-marco-qid": 1}) + "\n")
    with pytest.raises(DataFormatError, match=r"iteration-01.jsonl:1: missing field\(s\) id, data, label; this looks "
                                              r"like an unannotated candidate file"):
        read_annotations([f])


def test_an_empty_file_may_be_allowed_for_the_toy_truth(tmp_path):
    empty = tmp_path / "annotations.jsonl"
    empty.write_text("")
    ann = read_annotations([empty], allow_empty=True)
    assert len(ann) == 0 and list(ann.columns)[:4] == ["id", "train_qid", "query", "topic_qid"]


def test_a_query_verified_for_two_topics_is_a_leak_of_each_as_table_2a_counts(tmp_path):
    """SPIRE-22's 12107344 "industrial espionage": Title-Identical for Robust04 311, Title-Generalization for 389,
    389's only leak. Table 2 (a) counts 648 leaks for 172 topics (642 distinct queries): one per query and topic."""
    from leakexp.lib.training_sets import leaking_queries, training_queries
    from leakexp.data.types import DictDocStore, TrainPool
    from leakexp.toolkit.annotations import table2

    f = _write(tmp_path / "a.jsonl", [
        _rec(45760, "12107344", "311", ["Title-Identical", "Variant-Identical"], "industrial espionage"),
        _rec(1, "555", "311", ["Title-Specialization"], "industrial espionage cases"),
        _rec(46208, "12107344", "389", ["Variant-Reformulation", "Title-Generalization"], "industrial espionage"),
        _rec(2, "777", "389", ["Different Topic"], "technology transfer")])
    ann = read_annotations([f])
    leaks = verified_leaks(ann, ["311", "389"])
    assert sorted(zip(leaks.train_qid, leaks.topic_qid)) == [("12107344", "311"), ("12107344", "389"),
                                                             ("555", "311")]
    a, b = table2(ann, {"robust04": ["311", "389"]})
    assert a.set_index("candidates").loc["true", ["queries", "topics"]].tolist() == [3, 2]
    assert a.set_index("candidates").loc["false", ["queries", "topics"]].tolist() == [1, 1]
    assert b.set_index("type").loc["Generalization", "robust04"] == 1
    # the pool's queries: one row per leak, so topic 389 keeps its leak; one training query to draw
    pool = TrainPool(pd.DataFrame([("12107344", "industrial espionage", "orcas"),
                                   ("555", "industrial espionage cases", "msmarco")], columns=["qid", "text", "source"]),
                     pd.DataFrame([("orcas", "12107344", "d1"), ("msmarco", "555", "d2")],
                                  columns=["source", "qid", "docno"]), DictDocStore({"d1": "x", "d2": "y"}))
    rows = leaking_queries(pool, leaks)
    assert len(rows) == 3 and sorted(rows.topic_qid.unique()) == ["311", "389"]
    assert sorted(zip(training_queries(rows).source, training_queries(rows).qid)) == [("msmarco", "555"),
                                                                                      ("orcas", "12107344")]


def test_table_2a_attributes_a_reused_topic_id_to_the_corpus_whose_text_matched(tmp_path):
    """Core 2018 may reuse a Robust04 id with another text (the toy world's 330): a candidate counts for the corpus
    whose topic text it matched, in Table 2 (a) as in the verified leaks."""
    from leakexp.toolkit.annotations import table2

    f = _write(tmp_path / "a.jsonl", [_rec(0, "1", "330", ["Title-Identical"], "obesity in children"),
                                      _rec(1, "2", "330", ["Title-Identical"], "iran nuclear program")])
    ann = read_annotations([f])
    pairs = pd.DataFrame({"train_qid": ["1", "2"], "query": ["obesity in children", "iran nuclear program"],
                          "topic_qid": ["330", "330"], "corpora": ["robust", "core18"]})
    corpora = {"robust": ["330"], "core18": ["330", "801"]}
    a, _ = table2(ann, corpora, pairs)
    true = a[a.candidates == "true"].set_index("corpus")
    assert true.queries.to_dict() == {"robust": 1, "core18": 1}
    for corpus, ids in corpora.items():
        assert len(verified_leaks(ann, ids, corpus=corpus, pairs=pairs)) == true.queries[corpus]
    assert table2(ann, corpora)[0].set_index(["corpus", "candidates"]).queries[("robust", "true")] == 2  # no pairs


def test_verify_prints_table_2a_counts_and_keeps_the_topic_of_a_query_leaking_twice(small_cfg, capsys):
    """On the toy world: `leakexp verify` counts a query verified for two topics for each (toy_robust 99 leaks of
    98 queries for 22 topics; counted per query it was 98 for 21, topic 323 lost), as Table 2 (a) does."""
    from conftest import SMALL

    from leakexp.cli.main import main
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner

    assert main(["verify", f"store={small_cfg.run.store}", *SMALL]) == 0
    printed = {line.split(":")[0]: line for line in capsys.readouterr().out.splitlines()}
    table = pd.read_csv(f"{small_cfg.run.store}/tables/toy/table2a.csv", dtype={"corpus": str, "candidates": str})
    true = table[table.candidates == "true"].set_index("corpus")
    for corpus in small_cfg.data.corpora:
        assert printed[corpus].startswith(f"{corpus}: {true.queries[corpus]} verified leaking queries for "
                                          f"{true.topics[corpus]} topics")
    assert printed["toy_robust"] == ("toy_robust: 99 verified leaking queries for 22 topics "
                                     "(98 distinct training queries)")
    r = runner(small_cfg, readonly=True)
    leaks = r.get(Ask.of("leaks", corpus="toy_robust"))
    twice = leaks[leaks.duplicated(["source", "qid"], keep=False)]
    assert sorted(twice.topic_qid) == ["311", "323"] and "323" in set(leaks.topic_qid)
    sets = [pd.read_parquet(r.ensure(Ask.of("build", corpus="toy_robust", leakage="msm", size=s)) / "instances.parquet")
            for s in small_cfg.grid.sizes]
    for f in sets:  # drawn once as a training query
        assert not f[f.origin == "msm-leak"].duplicated(["source", "qid", "label"]).any()
