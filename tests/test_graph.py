"""The A-leakage audit on hand-made graphs with known answers, the WordNet and edge-list readers, the splits,
and ``leakexp graph-audit`` end to end."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from leakexp.toolkit import graph
from leakexp.data.files import DataFormatError


def _edges(rows):
    return pd.DataFrame(rows, columns=["head", "tail", "label", "split"])


def _paths(rows):
    return graph.held_out_paths(_edges(rows), progress=False).set_index(["head", "tail"])


def test_paths_triangle_length_and_parity():
    p = _paths([("a", "b", "synonym", "train"), ("b", "c", "antonym", "train"),
                ("a", "c", "antonym", "test"), ("c", "a", "synonym", "val"), ("a", "b", "synonym", "test"),
                ("b", "b", "synonym", "test")])
    cols = ["path_length", "A", "parity_conflict", "applicable", "predicted_antonym", "correct"]
    assert p.loc[("a", "c"), cols].tolist() == [2, 1, False, True, True, True]
    assert (p.loc[("c", "a"), "path_length"], p.loc[("c", "a"), "predicted_antonym"]) == (2, True)
    assert not p.loc[("c", "a"), "correct"]  # gold synonym, A odd
    assert (p.loc[("a", "b"), "path_length"], p.loc[("a", "b"), "A"]) == (1, 0)
    assert (p.loc[("b", "b"), "path_length"], p.loc[("b", "b"), "A"]) == (0, 0)  # self-pair of a training vertex
    assert list(pd.unique(p.split)) == ["val", "test"]  # val before test, whatever the input order


def test_paths_antonym_chain_counts_a_and_parity():
    labels = ["antonym", "antonym", "synonym", "antonym", "antonym"]
    rows = [(f"v{i}", f"v{i + 1}", lab, "train") for i, lab in enumerate(labels)]
    rows += [("v0", f"v{k}", "antonym", "test") for k in range(1, 6)]
    p = _paths(rows)
    assert p.path_length.tolist() == [1, 2, 3, 4, 5]
    assert p.A.tolist() == [1, 2, 2, 3, 4]
    assert p.predicted_antonym.tolist() == [True, False, False, True, False]
    table = graph.a_parity_table(p.reset_index()).iloc[0]
    assert (table.applicable, table.accuracy, table["majority rate"]) == (5, 0.4, 1.0)
    lengths = graph.path_length_table(p.reset_index()).set_index("path length").test
    assert lengths.to_dict() == {"0": 0, "1": 1, "2": 1, "3": 1, "4+": 2, "NA": 0, "total": 5}


def test_disconnected_pair_and_unknown_vertices_are_na():
    p = _paths([("a", "b", "synonym", "train"), ("c", "d", "antonym", "train"),
                ("a", "c", "antonym", "test"), ("x", "y", "synonym", "test"), ("x", "x", "synonym", "test"),
                ("a", "x", "antonym", "test")])
    assert (p.path_length == graph.NA).all() and (p.A == graph.NA).all() and not p.applicable.any()
    table = graph.a_parity_table(p.reset_index()).iloc[0]
    assert table.applicable == 0 and table.applicability == 0.0 and math.isnan(table.accuracy)
    assert graph.path_length_table(p.reset_index()).set_index("path length").test["NA"] == 4


def test_ties_of_different_parity_first_found_path_does_not_depend_on_input_order():
    # two shortest paths s-a-t (A = 0) and s-b-t (A = 1); the first found walks back from t to the adjacent
    # vertex with the smallest index, vertices numbered in sorted order: via a, in either input order
    via_a = [("s", "a", "synonym", "train"), ("a", "t", "synonym", "train"),
             ("s", "b", "antonym", "train"), ("b", "t", "synonym", "train"), ("s", "t", "antonym", "test")]
    p = _paths(via_a).iloc[0]
    assert (p.path_length, p.A, p.parity_conflict, p.predicted_antonym) == (2, 0, True, False)
    via_b = [via_a[2], via_a[3], via_a[0], via_a[1], ("t", "s", "antonym", "test")]
    p = _paths(via_b).iloc[0]
    assert (p.path_length, p.A, p.parity_conflict, p.predicted_antonym) == (2, 0, True, False)
    t = graph.a_parity_table(_paths(via_a).reset_index()).iloc[0]
    assert (t.accuracy, t["accuracy min"], t["accuracy max"], t["parity conflicts"]) == (0.0, 0.0, 1.0, 1)
    # ties of the same parity are no conflict
    same = [("s", "a", "antonym", "train"), ("a", "t", "synonym", "train"), ("s", "b", "synonym", "train"),
            ("b", "t", "antonym", "train"), ("s", "t", "antonym", "test")]
    p = _paths(same).iloc[0]
    assert (p.A, p.parity_conflict, p.correct) == (1, False, True)


def test_parallel_edges_with_both_labels_conflict_and_use_the_first():
    p = _paths([("a", "b", "synonym", "train"), ("b", "a", "antonym", "train"), ("a", "b", "antonym", "test")])
    assert p.iloc[0][["path_length", "A", "parity_conflict"]].tolist() == [1, 0, True]


@pytest.mark.parametrize("seed", range(6))
def test_paths_match_networkx_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    n = 25
    rows = [(f"v{rng.integers(n)}", f"v{rng.integers(n)}", rng.choice(["synonym", "antonym"]),
             rng.choice(["train", "train", "test"])) for _ in range(40)]
    edges = _edges(rows)
    p = graph.held_out_paths(edges, progress=False)
    g = nx.MultiGraph()
    for h, t, lab, split in rows:
        if split == "train":
            g.add_edge(h, t, ant=int(lab == "antonym"))
    for row in p.itertuples():
        if row.head not in g or row.tail not in g or not nx.has_path(g, row.head, row.tail):
            assert row.path_length == graph.NA
            continue
        assert row.path_length == nx.shortest_path_length(g, row.head, row.tail)
        parities = set()
        for path in nx.all_shortest_paths(g, row.head, row.tail):
            options = {0}
            for u, v in zip(path, path[1:]):
                options = {o + d["ant"] for o in options for d in g.get_edge_data(u, v).values()}
            parities |= {o % 2 for o in options}
        assert row.parity_conflict == (parities == {0, 1})
        assert row.A % 2 in parities


def test_cross_split_pairs_find_reverse_and_duplicate_edges():
    edges = _edges([("cat", "feline", "hypernym", "train"), ("feline", "cat", "hyponym", "test"),
                    ("dog", "canine", "hypernym", "train"), ("dog", "canine", "hypernym", "test"),
                    ("x", "y", "similar", "val"), ("y", "x", "similar", "test"), ("p", "q", "similar", "test")])
    pairs = graph.cross_split_pairs(edges)
    found = set(map(tuple, pairs[["split", "head", "kind", "other split"]].to_numpy().tolist()))
    assert found == {("test", "feline", "reverse", "train"), ("test", "dog", "duplicate", "train"),
                     ("val", "x", "reverse", "test"), ("test", "y", "reverse", "val")}
    t = graph.cross_split_table(edges, pairs).set_index(["split", "other split"])
    assert t.loc[("test", "train")].tolist() == [4, 1, 1, 1, 0]  # edges, dups, dups same label, revs, revs same
    assert t.loc[("val", "test")].tolist() == [1, 0, 0, 1, 1]


WORDNET_HEADER = ("  1 This software and database is being provided to you, the LICENSEE, by  \n"
                  "  2 Princeton University under the following license.  \n")


def test_read_wordnet_dict_format(tmp_path):
    # wndb(5WN): offset lex_filenum ss_type w_cnt(hex) word lex_id(hex) ... p_cnt ptr(symbol offset pos st(hex))
    (tmp_path / "data.adj").write_text(WORDNET_HEADER + (
        "00001740 00 a 01 able 0 002 ! 00002098 a 0101 & 00002500 s 0000 | having the means  \n"
        "00002098 00 a 01 unable 0 002 ! 00001740 a 0101 + 05207437 n 0101 | lacking the means  \n"
        "00002500 00 s 02 Capable 0 adequate(p) a 001 & 00001740 a 0000 | having capacity  \n"), encoding="latin-1")
    words = " ".join(f"w{i} {i % 16:x}" for i in range(11))
    (tmp_path / "data.verb").write_text(WORDNET_HEADER + (
        f"00000100 29 v 0b {words} 001 ! 00000200 v 0a01 02 + 02 00 + 08 0b | eleven words  \n"
        "00000200 29 v 01 stop 0 001 ! 00000100 v 010a 01 + 02 00 | the antonym of the tenth  \n"))
    synsets = graph.read_wordnet(tmp_path, "adj")
    assert [s.words for s in synsets] == [("able",), ("unable",), ("capable", "adequate")]
    assert synsets[0].pointers[0] == ("!", 2098, "a", 1, 1) and synsets[2].ss_type == "s"
    pairs = graph.wordnet_pairs(tmp_path, "adj", vocabulary="all", antonyms="lemmas", similar_to=True)
    assert sorted(map(tuple, pairs.to_numpy().tolist())) == [
        ("able", "adequate", "synonym"), ("able", "capable", "synonym"), ("able", "unable", "antonym"),
        ("capable", "adequate", "synonym")]
    assert len(graph.wordnet_pairs(tmp_path, "adj", vocabulary="antonyms", similar_to=True)) == 1
    assert len(graph.wordnet_pairs(tmp_path, "adj", vocabulary="any", similar_to=True, balance=True)) == 2
    verb = graph.wordnet_pairs(tmp_path, "verb", vocabulary="all", antonyms="lemmas")
    assert (verb.label == "synonym").sum() == 55  # 11 words (w_cnt 0b)
    assert verb[verb.label == "antonym"][["head", "tail"]].values.tolist() == [["w9", "stop"]]  # word 0a = w9
    # the benchmarks' construction (default): antonym edges between every lemma of the two synsets
    verb = graph.wordnet_pairs(tmp_path, "verb", vocabulary="all")
    assert (verb.label == "antonym").sum() == 11 and (verb.label == "synonym").sum() == 55
    assert graph.wordnet_pairs(tmp_path, "adj").values.tolist() == [["able", "unable", "antonym"]]


def test_read_wordnet_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="wordnet-base"):
        graph.read_wordnet(tmp_path, "noun")
    (tmp_path / "data.adj").write_text(WORDNET_HEADER + "00001740 00 a 01 able 0 002 ! 00002098 a 0101 | x\n")
    with pytest.raises(DataFormatError, match=r"data.adj:3: .*wndb"):
        graph.read_wordnet(tmp_path, "adj")


@pytest.mark.skipif(not (graph.DEFAULT_WORDNET / "data.adj").is_file(), reason="WordNet 3.0 is not installed")
def test_read_wordnet_installed_database():
    counts = {pos: len(graph.read_wordnet(graph.DEFAULT_WORDNET, pos)) for pos in ("adj", "noun", "verb", "adv")}
    assert counts == {"adj": 18156, "noun": 82115, "verb": 13767, "adv": 3621}  # WordNet 3.0's synsets per file
    pairs = graph.wordnet_pairs(graph.DEFAULT_WORDNET, "adj", vocabulary="all", antonyms="lemmas", similar_to=True)
    assert pairs.label.value_counts().to_dict() == {"synonym": 46609, "antonym": 1829}
    assert pairs[(pairs["head"] == "good") & (pairs["tail"] == "bad")].label.tolist() == ["antonym"]
    pairs = graph.wordnet_pairs(graph.DEFAULT_WORDNET, "adj")  # the benchmarks' construction
    assert pairs.label.value_counts().to_dict() == {"antonym": 3331, "synonym": 1975}


@pytest.mark.skipif(not (graph.DEFAULT_WORDNET / "data.adj").is_file(), reason="WordNet 3.0 is not installed")
def test_wordnet_benchmark_shows_the_leak(tmp_path):
    # the paper's construction, random 70/5/25 edge split: A-parity clearly above the majority class
    edges = graph.edge_split(graph.wordnet_pairs(graph.DEFAULT_WORDNET, "adj"), seed=0, stratify=False)
    for split, f in graph.graph_audit(edges, tmp_path)["splits"].items():
        assert f["applicable"] > 0.5 * f["edges"] and f["accuracy"] > f["majority_rate"] + 0.3, split


def test_read_edges_formats_and_errors(tmp_path):
    (tmp_path / "all.tsv").write_text("# comment\na\tb\tantonym\ttrain\n\nb\tc\tsynonym\ttest\n")
    (tmp_path / "wn18.txt").write_text("cat\t_hypernym\tfeline\n")
    edges = graph.read_edges([tmp_path / "all.tsv", f"val={tmp_path / 'wn18.txt'}"], ("head", "label", "tail"))
    assert edges.values.tolist()[-1] == ["cat", "feline", "_hypernym", "val"]
    assert edges.values.tolist()[0] == ["a", "antonym", "b", "train"]  # columns: head, LABEL, tail for both files
    (tmp_path / "bad.tsv").write_text("a\tb\tantonym\ttrain\na\tb\tantonym\n")
    with pytest.raises(DataFormatError, match=r"bad.tsv:2: expected 4"):
        graph.read_edges([tmp_path / "bad.tsv"])
    with pytest.raises(FileNotFoundError, match="missing.tsv"):
        graph.read_edges([f"train={tmp_path / 'missing.tsv'}"])
    with pytest.raises(DataFormatError, match="no edges in split 'train'"):
        graph.held_out_paths(_edges([("a", "b", "antonym", "dev")]), progress=False)


def test_edge_split_takes_the_papers_proportions_per_label():
    edges = pd.DataFrame({"head": [f"h{i}" for i in range(200)], "tail": [f"t{i}" for i in range(200)],
                          "label": ["antonym", "synonym"] * 100})
    split = graph.edge_split(edges, seed=3)
    counts = pd.crosstab(split.split, split.label)
    assert counts.loc[["train", "val", "test"]].values.tolist() == [[70, 70], [5, 5], [25, 25]]
    assert split.equals(graph.edge_split(edges, seed=3))
    assert not split.split.equals(graph.edge_split(edges, seed=4).split)


def test_vertex_and_component_splits_leave_no_path_between_held_out_pairs():
    edges = graph.synthetic_graph(seed=1, concepts=120)
    standard = graph.held_out_paths(graph.edge_split(edges, seed=1), progress=False)
    assert standard.applicable.mean() > 0.5  # the standard construction leaks
    for how in ("vertices", "components"):
        split = graph.RESPLITS[how](edges, seed=1)
        paths = graph.held_out_paths(split, progress=False)
        assert len(paths) > 20 and not paths.applicable.any()
        train = set(split.loc[split.split == "train", ["head", "tail"]].to_numpy().ravel())
        held = set(split.loc[split.split != "train", ["head", "tail"]].to_numpy().ravel())
        assert not train & held
    assert len(graph.component_split(edges, seed=1)) == len(edges)  # nothing dropped
    kept = graph.vertex_split(edges, seed=1).split.value_counts(normalize=True)
    assert abs(kept["train"] - 0.70) < 0.1 and abs(kept["test"] - 0.25) < 0.1


def test_demo_audits_then_resplit_removes_the_leak(tmp_path):
    figures = graph.demo(tmp_path / "a", seed=0)
    for split in ("val", "test"):
        f = figures["audit"]["splits"][split]
        assert f["applicable"] > 0.7 * f["edges"] and f["accuracy"] > f["majority_rate"] + 0.2
        assert f["reverses"] > 0 and f["path_lengths"]["1"] > 0
        r = figures["resplit"]["splits"][split]
        assert r["applicable"] == 0 and r["path_lengths"]["NA"] == r["edges"] > 0
    for name in ("table3.md", "table4.csv", "table5.tex", "cross_split.md", "path_lengths.png", "edges.tsv",
                 "resplit-vertices/edges.tsv", "resplit-vertices/table5.csv", "resplit-vertices/path_lengths.png"):
        assert (tmp_path / "a" / name).stat().st_size > 0, name
    again = graph.demo(tmp_path / "b", seed=0)
    for fig in (figures, again):
        for key in ("audit", "resplit"):
            fig[key].pop("bfs_seconds")
    assert again == figures
    for name in ("table5.csv", "held_out_paths.csv", "summary.json", "resplit-vertices/edges.tsv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert not list(tmp_path.rglob(".*tmp*"))  # nothing half-written left behind


def test_cli_graph_audit_end_to_end(tmp_path, capsys):
    from leakexp.cli.main import main

    path = tmp_path / "tiny.tsv"
    path.write_text("a\tb\tsynonym\ttrain\nb\tc\tantonym\ttrain\nd\te\tsynonym\ttrain\n"
                    "a\tc\tantonym\ttest\nc\ta\tantonym\ttest\na\tx\tsynonym\ttest\nb\ta\tsynonym\tval\n")
    rc = main(["graph-audit", str(path), "--out", str(tmp_path / "out"), "--resplit", "components"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "split test: 3 held-out edges" in out
    assert "  a_parity_accuracy: 1.0000 (range over tie-breaks 1.0000-1.0000)\n" in out
    assert "  a_parity_accuracy by path length: 0=- 1=- 2=1.000 3=- 4+=-\n  a_parity_applicable: 2 of 3\n" in out
    assert "  majority_class_rate: 1.0000 (antonym, on the applicable edges)" in out
    assert "  a_parity_applicable: 1 of 1\n" in out  # val: (b, a) reverses a training edge
    # components {a, b, c, x} (6 edges) -> train, {d, e} -> test, val empty
    resplit = (tmp_path / "out" / "resplit-components" / "edges.tsv").read_text().splitlines()
    assert sorted(line.split("\t")[3] for line in resplit) == ["test"] + ["train"] * 6
    assert out.endswith("a_parity_applicable: 0 of 1\n" + out.split("a_parity_applicable: 0 of 1\n")[1])
    assert (tmp_path / "out" / "table5.md").exists()
    (tmp_path / "bad.tsv").write_text("a\tb\tsynonym\n")
    rc = main(["graph-audit", str(tmp_path / "bad.tsv"), "--out", str(tmp_path / "bad")])
    assert rc == 2 and "bad.tsv:1: expected 4" in capsys.readouterr().err
    rc = main(["graph-audit", "--wordnet", str(tmp_path / "nowhere"), "--out", str(tmp_path / "wn")])
    assert rc == 2 and "wordnet-base" in capsys.readouterr().err


# -- figures a user can cite ------------------------------------------------------------------------------------
def test_audit_figures_do_not_depend_on_the_input_order(tmp_path):
    edges = graph.edge_split(graph.synthetic_graph(seed=2, concepts=80), seed=2)
    shuffled = edges.sample(frac=1.0, random_state=5).reset_index(drop=True)
    flipped = shuffled.rename(columns={"head": "tail", "tail": "head"})[edges.columns]  # every pair reversed
    runs = [graph.graph_audit(e, tmp_path / str(i)) for i, e in enumerate((edges, shuffled, flipped))]
    for f in runs[1:]:
        for split in ("val", "test"):
            for key in ("accuracy", "accuracy_min", "accuracy_max", "applicable", "accuracy_by_length"):
                assert f["splits"][split][key] == runs[0]["splits"][split][key], (split, key)
    assert (tmp_path / "0" / "table5.csv").read_bytes() == (tmp_path / "1" / "table5.csv").read_bytes()
    t = runs[0]["splits"]["test"]
    assert t["accuracy_min"] <= t["accuracy"] <= t["accuracy_max"] and t["accuracy_min"] < t["accuracy_max"]
    lines = graph.summary_lines(runs[0])
    line = lines[lines.index(next(x for x in lines if x.startswith("split test:"))) + 1]
    assert f"{t['accuracy']:.4f} (range over tie-breaks {t['accuracy_min']:.4f}-{t['accuracy_max']:.4f})" in line


def test_accuracy_per_path_length_and_distinct_cross_split_counts(tmp_path):
    edges = _edges([("a", "b", "synonym", "train"), ("b", "c", "antonym", "train"), ("x", "y", "synonym", "train"),
                    ("b", "a", "synonym", "test"), ("a", "c", "synonym", "test"), ("x", "x", "synonym", "test"),
                    ("b", "a", "synonym", "val"), ("x", "x", "synonym", "val")])
    f = graph.graph_audit(edges, tmp_path)
    t = f["splits"]["test"]
    # (b, a): length 1, right; (a, c): length 2, A = 1, wrong; (x, x): length 0, right
    assert t["accuracy_by_length"] == {"0": 1.0, "1": 1.0, "2": 0.0, "3": None, "4+": None}
    # (b, a) reverses a training edge and duplicates a val edge; (x, x) duplicates a val edge and is not also
    # its reverse: each edge counted once per kind, not once per other split
    assert (t["reverses"], t["duplicates"]) == (1, 2)


def test_every_split_reports_class_balance_and_warns_when_degenerate(tmp_path):
    edges = _edges([("a", "b", "antonym", "train"), ("b", "c", "synonym", "train"), ("c", "d", "antonym", "train"),
                    ("d", "e", "synonym", "train"), ("a", "c", "antonym", "test"), ("b", "d", "antonym", "test")])
    f = graph.graph_audit(edges, tmp_path)
    assert f["balance"]["train"] == {"edges": 4, "antonym_share": 0.5}
    assert f["balance"]["test"] == {"edges": 2, "antonym_share": 1.0}
    lines = "\n".join(graph.summary_lines(f))
    assert "warning: split test: 100.0 % antonyms against 66.7 % overall" in lines
    assert "warning: split val is empty" in lines


def test_cli_strict_labels_header_lines_and_keyed_outputs(tmp_path, capsys, monkeypatch):
    from leakexp.cli.main import main

    (tmp_path / "h.tsv").write_text("head\ttail\tlabel\tsplit\na\tb\tantonym\ttrain\n")
    rc = main(["graph-audit", str(tmp_path / "h.tsv"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "h.tsv:1: label 'label' is not one of the accepted labels 0, 1, antonym, synonym" in err
    assert "header line" in err
    (tmp_path / "u.tsv").write_text("a\tb\tantonym\ttrain\nb\tc\tsynoym\ttest\n")
    rc = main(["graph-audit", str(tmp_path / "u.tsv"), "--out", str(tmp_path / "o")])
    assert rc == 2 and "u.tsv:2: label 'synoym'" in capsys.readouterr().err
    rc = main(["graph-audit", str(tmp_path / "u.tsv"), "--synonym-label", "synoym", "--out", str(tmp_path / "o")])
    assert rc == 0
    capsys.readouterr()
    monkeypatch.setenv("LEAKEXP_STORE", str(tmp_path / "store"))
    for seed in ("1", "2"):
        assert main(["graph-audit", "--seed", seed]) == 0
    reports = sorted(p.parent for p in (tmp_path / "store" / "graph-audit" / "synthetic").glob("*/summary.json"))
    assert len(reports) == 2  # one folder per configuration, none overwritten
    printed = capsys.readouterr().out
    assert all(f"report: {p} " in printed for p in reports)


def test_cli_graph_audit_reads_split_files_named_like_a_setting_section(tmp_path, capsys):
    """The README's `leakexp graph-audit train=adj.train val=adj.val test=adj.test`: `train` is also a config section,
    but a section takes no file path, so `train=PATH` names the training split's edge file; `store=DIR` stays a setting."""
    from leakexp.cli.main import main

    (tmp_path / "adj.train").write_text("a\tb\tsynonym\nb\tc\tantonym\nd\te\tsynonym\n")
    (tmp_path / "adj.val").write_text("b\ta\tsynonym\n")
    (tmp_path / "adj.test").write_text("a\tc\tantonym\nc\ta\tantonym\na\tx\tsynonym\n")
    rc = main(["graph-audit", f"train={tmp_path / 'adj.train'}", f"val={tmp_path / 'adj.val'}",
               f"test={tmp_path / 'adj.test'}", f"store={tmp_path / 'store'}"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "split test: 3 held-out edges" in out and "  a_parity_applicable: 2 of 3\n" in out
    assert list((tmp_path / "store" / "graph-audit").iterdir())  # the store setting was read as one


def test_wordnet_without_dir_reads_leakexp_wordnet(tmp_path, monkeypatch, capsys):
    """README: `LEAKEXP_WORDNET=DIR` points at a WordNet dict folder other than /usr/share/wordnet; `--wordnet`
    without DIR read /usr/share/wordnet whatever the variable said."""
    from leakexp.cli.main import main

    folder = tmp_path / "dict"
    folder.mkdir()
    lines = [f"{1000 + 20 * i:08d} 00 a 02 good{i} 0 fine{i} 0 001 ! {1010 + 20 * i:08d} a 0101 | g  \n"
             f"{1010 + 20 * i:08d} 00 a 02 bad{i} 0 poor{i} 0 001 ! {1000 + 20 * i:08d} a 0101 | g  \n"
             for i in range(12)]
    (folder / "data.adj").write_text(WORDNET_HEADER + "".join(lines), encoding="latin-1")
    monkeypatch.setenv("LEAKEXP_WORDNET", str(folder))
    assert main(["graph-audit", "--wordnet", "--out", str(tmp_path / "out")]) == 0
    assert "a_parity_applicable: " in capsys.readouterr().out and (tmp_path / "out" / "table5.md").is_file()
    monkeypatch.setenv("LEAKEXP_WORDNET", str(tmp_path / "nowhere"))
    assert main(["graph-audit", "--wordnet", "--out", str(tmp_path / "out2")]) == 2
    assert f"{tmp_path / 'nowhere' / 'data.adj'}: WordNet database file not found" in capsys.readouterr().err
