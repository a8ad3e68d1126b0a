import pytest

from leakexp.data.files import (DataFormatError, iter_docs, read_qrels, read_topic_ids, read_trec_topics,
                                read_variants)

# irregular whitespace, a field spanning lines and a missing closing tag, as in the real TREC files
TOPICS = """<top>
<num> Number: 301
<title> International Organized Crime

<desc> Description:
Identify organizations that participate in international
criminal activity.

<narr> Narrative:
A relevant document must as a minimum identify the organization.
</top>

<top>

<num>Number:   441
<title>   Lyme disease
<desc> Description:  How do you prevent and treat Lyme disease?
<narr> Narrative:
Documents that discuss current prevention methods are relevant.

</top>
"""


def test_trec_topics_tolerate_irregular_whitespace(tmp_path):
    f = tmp_path / "topics.txt"
    f.write_text(TOPICS)
    t = read_trec_topics(f)
    assert [x.qid for x in t] == ["301", "441"]
    assert t[0].title == "International Organized Crime"
    assert t[0].description == "Identify organizations that participate in international criminal activity."
    assert t[1].title == "Lyme disease"
    assert t[1].description == "How do you prevent and treat Lyme disease?"
    assert t[1].narrative.startswith("Documents that discuss")
    assert read_topic_ids(f) == ["301", "441"]


def test_topic_ids_from_a_plain_list(tmp_path):
    f = tmp_path / "ids.txt"
    f.write_text("301\n\n441\n")
    assert read_topic_ids(f) == ["301", "441"]


def test_non_topic_file_is_rejected(tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("no topics here")
    with pytest.raises(DataFormatError, match="no <top> blocks"):
        read_trec_topics(f)


def test_qrels_parse_and_malformed_line_names_file_and_line(tmp_path):
    f = tmp_path / "qrels.txt"
    f.write_text("301 0 FBIS3-10082 1\n301 0 FBIS3-10169 0\n441 0 LA010189-0001 2\n")
    q = read_qrels(f)
    assert q.values.tolist() == [["301", "FBIS3-10082", 1], ["301", "FBIS3-10169", 0], ["441", "LA010189-0001", 2]]
    f.write_text("301 0 A 1\n301 0 B\n")
    with pytest.raises(DataFormatError, match=r"qrels.txt:2"):
        read_qrels(f)


def test_variants_and_documents(tmp_path):
    v = tmp_path / "v.tsv"
    v.write_text("441\tlyme disease symptoms\n441\ttick bite illness\n301\torganized crime\n")
    assert read_variants(v) == {"441": ["lyme disease symptoms", "tick bite illness"], "301": ["organized crime"]}
    j = tmp_path / "d.jsonl"
    j.write_text('{"docno": "d1", "text": "alpha"}\n{"docno": "d2", "text": "beta"}\n')
    assert list(iter_docs(j)) == [("d1", "alpha"), ("d2", "beta")]
    t = tmp_path / "d.tsv"
    t.write_text("docno\ttext\nd1\talpha beta\n")
    assert list(iter_docs(t)) == [("d1", "alpha beta")]
    j.write_text('{"docno": "d1"}\n')
    with pytest.raises(DataFormatError, match="d.jsonl:1"):
        list(iter_docs(j))
