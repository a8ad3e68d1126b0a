import pytest

from leakexp.data.files import (DataFormatError, iter_docs, read_docs, read_qrels, read_queries, read_topic_ids,
                                read_trec_topics, read_variants)

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


def test_topic_without_title_is_an_error_naming_file_and_topic(tmp_path):
    f = tmp_path / "topics.txt"
    f.write_text(TOPICS.replace("<title>   Lyme disease\n", ""))
    with pytest.raises(DataFormatError, match=r"topics.txt: topic 441 has no <title>"):
        read_trec_topics(f)
    f.write_text(TOPICS.replace("<title>   Lyme disease", "<title>   "))
    with pytest.raises(DataFormatError, match=r"topic 441 has no <title>"):
        read_trec_topics(f)


def test_invalid_utf8_names_file_line_and_byte(tmp_path):
    good = '{"docno": "d1", "text": "caf\u00e9 \u201cquoted\u201d"}\n'.encode()
    f = tmp_path / "d.jsonl"
    bad = b'{"docno": "d2", "text": "caf\xe9"}\n'  # a latin-1 e-acute
    f.write_bytes(good + bad)
    with pytest.raises(DataFormatError, match=rf"d.jsonl:2: invalid UTF-8 at byte {len(good) + bad.index(0xE9)}"):
        list(iter_docs(f))
    f.write_bytes(good)  # valid UTF-8 with accents and curly quotes reads back unchanged
    assert list(iter_docs(f)) == [("d1", "caf\u00e9 \u201cquoted\u201d")]
    t = tmp_path / "q.tsv"
    t.write_bytes(b"1\tok\n2\tbad \xff\n")
    with pytest.raises(DataFormatError, match=r"q.tsv:2: invalid UTF-8"):
        read_queries(t)


def test_duplicate_docnos_are_an_error_identical_repeats_a_counted_warning(tmp_path, caplog):
    f = tmp_path / "d.jsonl"
    f.write_text('{"docno": "d1", "text": "a"}\n{"docno": "d2", "text": "b"}\n{"docno": "d1", "text": "c"}\n')
    with pytest.raises(DataFormatError, match=r"d.jsonl:3: docno 'd1' is already on line 1 with another text"):
        read_docs(f)
    f.write_text('{"docno": "d1", "text": "a"}\n{"docno": "d2", "text": "b"}\n{"docno": "d1", "text": "a"}\n')
    with caplog.at_level("WARNING"):
        assert read_docs(f) == {"d1": "a", "d2": "b"}
    assert "1 repeated line(s) of identical documents dropped" in caplog.text


def test_empty_documents_file_is_an_error(tmp_path):
    f = tmp_path / "docs.jsonl"
    f.write_text("\n")
    with pytest.raises(DataFormatError, match=r"docs.jsonl: no documents"):
        read_docs(f)


def test_duplicate_query_ids_in_one_file(tmp_path, caplog):
    f = tmp_path / "msmarco.tsv"
    f.write_text("1\tlyme disease\n2\thubble\n1\tferry sinkings\n")
    with pytest.raises(DataFormatError, match=r"msmarco.tsv:3: query id '1' is already on line 1 with another text"):
        read_queries(f)
    f.write_text("1\tlyme disease\n2\thubble\n1\tlyme disease\n")
    with caplog.at_level("WARNING"):
        assert read_queries(f).values.tolist() == [["1", "lyme disease"], ["2", "hubble"]]
    assert "1 repeated line(s) of identical queries dropped" in caplog.text


def test_local_collection_rejects_duplicate_docnos_and_an_empty_documents_file(tmp_path):
    from leakexp.data.sources import load_local_collection

    (tmp_path / "topics.txt").write_text(TOPICS)
    (tmp_path / "qrels.txt").write_text("301 0 d1 1\n301 0 d2 0\n")
    docs = tmp_path / "docs.tsv"
    args = dict(topics=tmp_path / "topics.txt", qrels=tmp_path / "qrels.txt", docs=docs)
    docs.write_text("d1\talpha\nd2\tbeta\nd1\tgamma\n")
    with pytest.raises(DataFormatError, match=r"docs.tsv:3: docno 'd1' is already on line 1"):
        load_local_collection("c", **args)
    docs.write_text("")
    with pytest.raises(DataFormatError, match=r"docs.tsv: no documents"):
        load_local_collection("c", **args)
    docs.write_text("d1\talpha\nd2\t\n")  # an empty document is a document
    c = load_local_collection("c", **args)
    assert len(c.docs) == 2 and c.docs["d2"] == ""


def _pool_files(tmp_path, msmarco="7\twhat is lyme disease\n8\thubble telescope\n",
                orcas="7\tferry sinkings\n9\tpolio vaccine\n"):
    (tmp_path / "msmarco.tsv").write_text(msmarco)
    (tmp_path / "orcas.tsv").write_text(orcas)
    (tmp_path / "msmarco.qrels").write_text("7 0 dA 1\n8 0 dB 1\n")
    (tmp_path / "orcas.qrels").write_text("7 0 dC 1\n9 0 dD 1\n9 0 dD 1\n12 0 dA 1\n")
    (tmp_path / "docs.tsv").write_text("dA\tlyme\ndB\thubble\ndC\tferry\ndD\tpolio\n")
    return dict(msmarco=tmp_path / "msmarco.tsv", orcas=tmp_path / "orcas.tsv", docs=tmp_path / "docs.tsv",
                msmarco_qrels=tmp_path / "msmarco.qrels", orcas_qrels=tmp_path / "orcas.qrels")


def test_local_train_pool_keys_queries_and_judgments_by_source(tmp_path, caplog):
    from leakexp.data.sources import load_local_train_pool

    with caplog.at_level("WARNING"):
        pool = load_local_train_pool(**_pool_files(tmp_path))
    # id 7 names two queries with their own judgments; the repeated judgment of orcas 9 counts once
    assert sorted(map(tuple, pool.qrels[["source", "qid", "docno"]].values.tolist())) == [
        ("msmarco", "7", "dA"), ("msmarco", "8", "dB"), ("orcas", "7", "dC"), ("orcas", "9", "dD")]
    assert "orcas.qrels: 1 judgment(s) of 1 query id(s) that" in caplog.text  # orcas has no query 12


def test_local_train_pool_duplicate_query_id_in_a_source_names_the_file(tmp_path):
    from leakexp.data.sources import load_local_train_pool

    files = _pool_files(tmp_path, orcas="7\tferry sinkings\n9\tpolio vaccine\n7\tferry disasters\n")
    with pytest.raises(DataFormatError, match=r"orcas.tsv:3: query id '7' is already on line 1 with another text"):
        load_local_train_pool(**files)
