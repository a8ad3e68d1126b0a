import json

import pandas as pd
import pytest

from leakexp.data.files import DataFormatError
from leakexp.verify import read_annotations, review_candidates, verified_leaks


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
    assert ann.id.tolist() == [7, 8] and ann.file.tolist() == [str(a)] * 2
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
