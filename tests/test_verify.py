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
    with pytest.raises(DataFormatError, match=r"h.jsonl:1: id 0 already annotated in .*g?.jsonl:1"):
        read_annotations([_write(tmp_path / "first.jsonl", [_rec(0, "9", "441", ["Title-Identical"])]), h])


def test_review_takes_top_k_per_topic():
    pairs = pd.DataFrame({"topic_qid": ["1"] * 4 + ["2"], "train_qid": list("abcde"),
                          "similarity": [0.92, 0.99, 0.95, 0.93, 0.97]})
    r = review_candidates(pairs, 2)
    assert list(zip(r.topic_qid, r.train_qid)) == [("1", "b"), ("1", "c"), ("2", "e")]
