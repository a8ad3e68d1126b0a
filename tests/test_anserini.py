"""The Anserini backend (bm25.backend=anserini) against Anserini's own tools, and Lucene's Porter stemmer.

Anserini's tests need Java 11+ and Anserini 0.22.1's jar (`make setup` installs it; LEAKEXP_ANSERINI_JAR names
another copy). Without Java they are skipped; with Java but no jar they fail (the setup is incomplete).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from leakexp.lib.analysis import analyze, lucene_porter

# Lucene's stems (DefaultEnglishAnalyzer, Anserini 0.22.1's DumpAnalyzedQueries), the Porter departures first:
# the reference C code maps bli -> ble and logi -> log in step 2, the published algorithm (Snowball's 'porter')
# does neither: possibly -> possibli, ecology -> ecologi there.
LUCENE_STEMS = {
    "possibly": "possibl", "terribly": "terribl", "incredibly": "incred", "ostensibly": "ostens",
    "assemblies": "assembl", "ecology": "ecolog", "technologies": "technolog", "apologies": "apolog",
    "analogy": "analog", "biology": "biologi",  # m("bio") = 0: logi stays
    "stability": "stabil", "probabilistic": "probabilist", "generalizations": "gener", "running": "run",
    "cats": "cat", "hopping": "hop", "filing": "file", "relational": "relat", "conditional": "condit",
    "rational": "ration", "valenci": "valenc", "digitizer": "digit", "conformabli": "conform",
    "radicalli": "radic", "differentli": "differ", "vileli": "vile", "analogousli": "analog",
    "vietnamization": "vietnam", "predication": "predic", "operator": "oper", "feudalism": "feudal",
    "decisiveness": "decis", "hopefulness": "hope", "callousness": "callous", "formaliti": "formal",
    "sensitiviti": "sensit", "sensibiliti": "sensibl", "triplicate": "triplic", "formative": "form",
    "formalize": "formal", "electriciti": "electr", "electrical": "electr", "hopeful": "hope",
    "goodness": "good", "revival": "reviv", "allowance": "allow", "inference": "infer", "airliner": "airlin",
    "adjustable": "adjust", "defensible": "defens", "irritant": "irrit", "replacement": "replac",
    "adjustment": "adjust", "dependent": "depend", "adoption": "adopt", "homologou": "homolog",
    "communism": "commun", "activate": "activ", "angulariti": "angular", "homologous": "homolog",
    "effective": "effect", "bowdlerize": "bowdler", "probate": "probat", "rate": "rate", "cease": "ceas",
    "controll": "control", "roll": "roll", "us": "us", "ox": "ox", "go": "go", "sky": "sky", "skies": "ski",
}


def test_lucenes_porter_stemmer_with_its_departures():
    for word, stem in LUCENE_STEMS.items():
        assert lucene_porter(word) == stem, word
    # the analysis chain: possessive, lower case, Lucene's 33 stop words, one- and two-letter words unstemmed
    assert analyze("The Ecology of John's possibly ABSURD assemblies, as it is") == [
        "ecolog", "john", "possibl", "absurd", "assembl"]
    assert analyze("Ecology", stemmer="none") == ["ecology"]


def _java_or_skip() -> str:
    java = shutil.which("java")
    if not java:
        pytest.skip("no Java here: Anserini's tests need it (apt-get install openjdk-17-jre-headless)")
    return java


@pytest.fixture(scope="module")
def jar():
    from leakexp.lib.bm25 import anserini_jar

    _java_or_skip()
    return anserini_jar()  # Java but no jar: fails, `make setup` installs it


def test_leakexp_analysis_equals_lucenes_on_a_word_list(tmp_path, jar):
    words = [*LUCENE_STEMS, "hubble", "telescopes", "lyme", "disease", "ticks", "deer", "stemming", "agreed",
             "feed", "bled", "sizing", "generously", "nationality", "arguing", "the", "and", "their", "there",
             "those", "thereby"]
    topics = tmp_path / "words.tsv"
    topics.write_text("".join(f"{i}\t{w}\n" for i, w in enumerate(words)))
    out = tmp_path / "words.out"
    subprocess.run(["java", "-cp", str(jar), "io.anserini.util.DumpAnalyzedQueries", "-topicreader", "TsvString",
                    "-topics", str(topics), "-output", str(out)], check=True, capture_output=True)
    lucene = dict(line.split("\t", 1) if "\t" in line else (line, "") for line in out.read_text().splitlines())
    ours = {str(i): " ".join(analyze(w)) for i, w in enumerate(words)}
    assert ours == {str(i): lucene.get(str(i), "") for i in range(len(words))}
    assert ours[str(words.index("the"))] == "" and ours[str(words.index("those"))] == "those"  # not in Lucene's list
    assert {w: ours[str(i)] for i, w in enumerate(words) if w in LUCENE_STEMS} == LUCENE_STEMS


def _trec_run(path: Path) -> pd.DataFrame:
    rows = [line.split() for line in path.read_text().splitlines()]
    return pd.DataFrame([(r[0], r[2], float(r[4])) for r in rows], columns=["qid", "docno", "score"])


def test_leakexps_anserini_run_equals_anserinis_searchcollection(tmp_path, jar):
    """The toy world's Core 2017 top-100 through leakexp's stages equals SearchCollection's own run on the same
    index (the toy world's TREC topic file, Anserini's own topic reader and default analysis, k1 0.9, b 0.4)."""
    from leakexp.runner.config import corpus_config
    from leakexp.runner.registry import compose
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner

    cfg = compose([f"store={tmp_path / 'store'}", "bm25.backend=anserini", "bm25.stemmer=porter",
                   "bm25.stopwords=lucene", "rerank.depth=100"])
    r = runner(cfg)
    ours = r.get(Ask.of("firststage", corpus="toy_core17"))
    index = r.get(Ask.of("index", name="toy_core17"))
    assert (index / "lucene").is_dir() and not (index / "pisa").exists()
    topics = r.get(Ask.of("toy")) / str(corpus_config("toy_core17")["collection"]) / "topics.txt"
    out = tmp_path / "cli.run"
    subprocess.run(["java", "-cp", str(jar), "io.anserini.search.SearchCollection", "-index", str(index / "lucene"),
                    "-topics", str(topics), "-topicreader", "Trec", "-bm25", "-bm25.k1", "0.9", "-bm25.b", "0.4",
                    "-hits", "100", "-output", str(out)], check=True, capture_output=True)
    cli = _trec_run(out)
    assert ours.qid.nunique() == 12 and len(ours) == len(cli) > 12 * 30
    for qid, group in cli.groupby("qid", sort=False):
        mine = ours[ours.qid == qid]
        assert mine.docno.tolist() == group.docno.tolist(), qid  # the same documents in the same order
        assert mine["rank"].tolist() == list(range(len(group)))
        assert (mine.score.to_numpy() - group.score.to_numpy()).__abs__().max() < 1e-4
    assert ours.groupby("qid").size().max() > 30  # deeper than the demo's depth: rerank.depth=100 was used


def test_missing_java_is_one_error_naming_the_fix_before_any_work(tmp_path, monkeypatch):
    from leakexp.runner.registry import compose
    from leakexp.runner.stage import ConfigError
    from leakexp.runner.registry import runner

    cfg = compose([f"store={tmp_path / 'store'}", "bm25.backend=anserini", "bm25.stemmer=porter"])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match=r"apt-get install openjdk-17-jre-headless") as err:
        runner(cfg)
    assert "there is no java on PATH" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "store").exists()  # nothing was started


def test_missing_jar_names_make_setup(tmp_path, monkeypatch):
    from leakexp.lib.bm25 import anserini_jar

    _java_or_skip()
    monkeypatch.setenv("LEAKEXP_ANSERINI_JAR", str(tmp_path / "nope.jar"))
    with pytest.raises(FileNotFoundError, match="LEAKEXP_ANSERINI_JAR"):
        anserini_jar()
    monkeypatch.delenv("LEAKEXP_ANSERINI_JAR")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"make setup.*pyserini==0\.22\.1"):
        anserini_jar()


def test_anserini_offers_its_own_stemmers_only():
    from leakexp.runner.registry import compose
    from leakexp.runner.stage import ConfigError

    with pytest.raises(ConfigError, match="bm25.stemmer=porter2 is not one of Anserini's stemmers"):
        compose(["bm25.backend=anserini", "bm25.stemmer=porter2"])
    with pytest.raises(ConfigError, match="bm25.backend"):
        compose(["bm25.backend=lucene"])
    from leakexp.runner.registry import compose as compose_only

    assert compose_only(["experiment=paper"]).bm25.backend == "anserini"
    assert compose_only([]).bm25.backend == "pisa"
