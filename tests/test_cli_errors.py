"""Every command given bad input ends in one line that names it, exit code 2 (1 when there is nothing to show),
and no traceback; a bug still shows its traceback and says how to report it."""

from __future__ import annotations

import pytest

from leakexp.cli.main import main


@pytest.fixture
def files(tmp_path):
    existing = tmp_path / "exists.txt"
    existing.write_text("x\n")
    edges = tmp_path / "train.tsv"
    edges.write_text("a\tb\tsynonym\n")
    return tmp_path, existing, edges


def _cases(tmp, existing, edges):
    store = f"store={tmp / 'store'}"
    return [
        (["cell", "bogus"], 2, "bad override"),
        (["status", store, "rerank.depth=0"], 2, "rerank.depth: input should be greater than 0"),
        (["status", store, "rerank.depth=abc"], 2, "rerank.depth: input should be a valid integer"),
        (["status", store, "bm25.k1=-1"], 2, "bm25.k1: input should be greater than or equal to 0"),
        (["status", store, "+colour=blue"], 2, "colour is not a setting of leakexp"),
        (["status", store, "grid.sizes.x=3"], 2, "grid.sizes.x=3: grid.sizes is a list"),
        (["plan", store, "experiment=nope"], 2, "experiment=nope is unknown"),
        (["verify", store, f"verify.annotations=[{tmp / 'missing.jsonl'}]"], 2, "missing.jsonl, which does not exist"),
        (["decontaminate", "--train", str(existing), "--test", str(existing), "--threshold", "nan", "--out",
          str(tmp / "d")], 2, "--threshold nan"),
        (["decontaminate", "--train", str(existing), "--test", str(existing), "--threshold", "2", "--out",
          str(tmp / "d")], 2, "--threshold 2"),
        (["audit", "--train", str(existing), "--test", str(existing), "--out", str(existing)], 2,
         "is an existing file"),
        (["resample", "resttest", "--train", str(existing), "--test", str(existing), "--buckets", "0", "--out",
          str(tmp / "r")], 2, "--buckets"),
        (["graph-audit", f"seed={edges}"], 2, "could be the setting seed="),
        (["graph-audit", str(tmp / "none.tsv")], 2, "none.tsv"),
        (["split-eval", str(existing), "--qrels", str(existing), "--audit", str(tmp / "no-audit")], 2, "no audit"),
        (["annotations", "kappa", str(tmp / "a.jsonl"), str(tmp / "b.jsonl")], 2, "a.jsonl"),
        (["tables", store], 2, "there is no store at"),
        # a set the training pool cannot fill: refused before any work, the cell's size and the grid's sizes
        (["cell", store, "size=20000"], 2, "size=20000: a training set of corpus=toy_robust leakage=none needs 10000 "
         "training queries but the training pool of data=toy holds 4000 (2 x data.queries_per_source=2000)"),
        (["train", store, "size=20000", "leakage=test"], 2, "the filler pool is exhausted; choose size <= "),
        (["plan", store, "grid.sizes=[128,9000]"], 2, "grid.sizes has 9000: "),
        (["plan", f"store={tmp / 'plan-store'}", "grid.sizes=[9000]", "data.queries_per_source=2250"], 0, None),
        (["status", store, "grid.sizes=[8200]"], 2, "raise data.queries_per_source"),
    ]


def test_bad_input_is_one_line_never_a_traceback(files, capsys):
    tmp, existing, edges = files
    for argv, code, text in _cases(tmp, existing, edges):
        if text is None:  # a case the checks let through (plan: nothing is computed, nothing written)
            assert main(argv) == 0, argv
            capsys.readouterr()
            continue
        rc = main(argv)
        err = capsys.readouterr().err
        assert "Traceback" not in err, (argv, err[-1500:])
        assert rc == code, (argv, rc, err[-500:])
        assert text in err, (argv, err[-500:])
        assert [line for line in err.splitlines() if line.startswith("leakexp:")], (argv, err)
    assert not (tmp / "store").exists()  # none of them wrote to the store


def test_a_bug_shows_its_traceback_and_how_to_report_it(monkeypatch, capsys):
    from leakexp.cli import commands

    def broken(overrides, **options):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(commands, "cmd_plan", broken)
    assert main(["plan"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError: a bug" in err and "this is a bug" in err


def test_graph_audit_takes_overrides_like_every_command(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["graph-audit", f"store={tmp_path / 'elsewhere'}"]) == 0
    assert "report:" in capsys.readouterr().out
    assert list((tmp_path / "elsewhere" / "graph-audit" / "synthetic").iterdir())  # the override's store, not ./store
    assert not (tmp_path / "store").exists()



def test_overrides_after_a_commands_options_are_overrides(tmp_path, monkeypatch, capsys):
    """Overrides on both sides of a command's options (`leakexp compare-runs store=/s --corpus core17 --run R
    experiment=paper`, a README example with the store in front): argparse alone fills the overrides once, with
    the first run of them, and refused the others as unrecognized arguments."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LEAKEXP_GLOVE", raising=False)
    rc = main(["compare-runs", f"store={tmp_path / 's'}", "--corpus", "core17", "--run",
               "bundled:core17.bm25-anserini.top100.run.gz", "experiment=paper", "rerank.first_stage=null"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("leakexp: config error: model.embeddings names glove.6B.300d.txt"), err
    assert main(["status", f"store={tmp_path / 's'}", "--verify", "grid.sizes=[128]"]) == 1
    assert "  45\n" in capsys.readouterr().out  # 3 corpora x 3 leakages x 1 size x 5 models: the override counted
    with pytest.raises(SystemExit) as usage:  # anything else left over is still a usage error
        main(["status", "--bogus", f"store={tmp_path / 's'}"])
    assert usage.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["annotations", "kappa", "a.jsonl", "b.jsonl", "experiment=paper"])  # kappa takes no overrides
    assert "unrecognized arguments: experiment=paper" in capsys.readouterr().err
