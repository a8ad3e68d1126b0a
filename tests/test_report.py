import numpy as np
import pandas as pd
import pytest

from leakexp.lib.report import latex_escape, latex_table, markdown_table
from leakexp.tables.paper import cv_latex, cv_table

SPECIAL = "cost $5 {x} a~b 2^3 R&D 50% #1 snake_case back\\slash"
ESCAPED = (r"cost \$5 \{x\} a\textasciitilde{}b 2\textasciicircum{}3 R\&D 50\% \#1 snake\_case "
           r"back\textbackslash{}slash")


def test_latex_escape_covers_every_special_character_once():
    assert latex_escape(SPECIAL) == ESCAPED
    assert latex_escape("0.224†") == r"0.224$^\dagger$"
    assert latex_escape("a<b>c") == r"a\textless{}b\textgreater{}c"


def test_latex_table_escapes_caption_header_and_cells_with_booktabs():
    df = pd.DataFrame({"col_1 %": [SPECIAL, "plain"], "value": [0.12345, np.nan]})
    tex = latex_table(df, f"Caption: {SPECIAL}", label="tab:t")
    lines = tex.splitlines()
    assert lines[:4] == [r"\begin{table}", r"\centering", rf"\caption{{Caption: {ESCAPED}}}", r"\label{tab:t}"]
    assert r"\begin{tabular}{lr}" in lines and r"\toprule" in lines and r"\midrule" in lines and r"\bottomrule" in lines
    assert r"col\_1 \% & value \\" in lines
    assert rf"{ESCAPED} & 0.123 \\" in lines
    assert r"plain &  \\" in lines  # a missing value stays empty


def test_markdown_table_keeps_marks_escapes_pipes_and_aligns_numbers():
    df = pd.DataFrame({"Model": ["KNRM", "a|b"], "nDCG@10": [0.2141, np.nan], "queries": [249, 50],
                       "MSM": ['<span style="color:red">**0.214**</span>', "**0.300**†"]})
    md = markdown_table(df).splitlines()
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in md]
    assert cells[0] == ["Model", "nDCG@10", "queries", "MSM"]
    assert md[1].startswith("|:-") and md[1].count("-:|") == 2  # text left-, numbers right-aligned
    assert cells[2] == ["KNRM", "0.214", "249", '<span style="color:red">**0.214**</span>']
    assert cells[3] == [r"a\|b", "", "50", "**0.300**†"]  # the pipe cannot split the row
    assert markdown_table(df[["nDCG@10"]], floatfmt="{:.4f}").splitlines()[2].strip("| ") == "0.2141"


def _summary(selection="best"):
    rows = []
    vals = {"duet": (0.201, 0.198, 0.224, True), "knrm": (0.194, 0.214, 0.309, False)}
    for m, (n, s, t, sig) in vals.items():
        for measure in ("nDCG@10", "MFR", "P@1"):
            for leakage, v in (("none", n), ("msm", s), ("test", t)):
                rows.append({"model": m, "measure": measure, "leakage": leakage, "selection": selection,
                             "mean": v, "effect": np.nan if leakage == "none" else v - n + 0.05,
                             "significant": sig and leakage == "test"})
    return pd.DataFrame(rows)


def test_cv_latex_keeps_bold_dagger_red_and_escapes_its_caption():
    table, marks, _ = cv_table(_summary(), ["duet", "knrm"])
    tex = cv_latex(marks, f"Table 3. {SPECIAL}", "tab:robust04")
    assert rf"\caption{{Table 3. {ESCAPED}}}" in tex and r"\label{tab:robust04}" in tex
    assert r"\textcolor{red}{\textbf{0.214}}" in tex and r"0.224$^\dagger$" in tex and r"\textbf{0.201}" in tex
    assert r"\multicolumn{3}{c}{nDCG@10}" in tex and r"\cmidrule(lr){2-4}" in tex
    assert r"\toprule" in tex and r"\bottomrule" in tex
    rows = [line for line in tex.splitlines() if line.startswith(("Duet", "KNRM"))]
    assert len(rows) == 2 and all(r.count("&") == 9 for r in rows)
    md = markdown_table(table)
    assert "**0.201**" in md and '<span style="color:red">**0.214**</span>' in md and "0.224†" in md
    assert "(+" not in md  # best: no effect column


def test_cv_table_under_max_effect_shows_the_paired_effect():
    table, marks, _ = cv_table(_summary("max_effect"), ["duet", "knrm"])
    t = table.set_index("Model")
    assert t.loc["Duet", "nDCG@10 Test"] == "0.224† (+0.073)"  # 0.224 - 0.201 + 0.05
    assert t.loc["KNRM", "nDCG@10 MSM"] == '<span style="color:red">**0.214** (+0.070)</span>'
    assert t.loc["Duet", "nDCG@10 None"] == "**0.201**"
    assert r"0.224$^\dagger$ (+0.073)" in cv_latex(marks, "c", "tab:x")


@pytest.mark.parametrize("fmt", ["png", "pdf", "svg"])
def test_an_equal_figure_is_equal_bytes_whenever_it_is_written(tmp_path, monkeypatch, fmt):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from leakexp.lib.report import save_figure

    written = []
    for epoch in ("0", "1700000000"):  # matplotlib stamps this time into PDF and SVG files
        monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
        fig, ax = plt.subplots(figsize=(2, 2))
        ax.plot([0, 1], [1, 0])
        written.append(save_figure(fig, tmp_path / f"f{epoch}.{fmt}").read_bytes())
        plt.close(fig)
    assert written[0] == written[1] and len(written[0]) > 100
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_summary_and_detail_report_mfr_as_the_reciprocal_of_the_seeds_mrr():
    """Two seeds, two topics: 1/MRR over seeds and topics; the arithmetic definition keeps the mean of means."""
    from leakexp.lib.report import summary
    from leakexp.tables.paper import detail

    ranks = {1: [1.0, 4.0], 2: [2.0, float("inf")]}  # seed -> first relevant rank of topics a, b
    rows = [("c", "none", 100, "knrm", seed, "MFR", q, r) for seed, rs in ranks.items() for q, r in zip("ab", rs)]
    rows += [("c", "none", 100, "knrm", seed, "P@1", q, float(r == 1)) for seed, rs in ranks.items() for q, r in zip("ab", rs)]
    results = pd.DataFrame(rows, columns=["corpus", "leakage", "size", "model", "seed", "measure", "qid", "value"])
    mrr = {1: (1 + 1 / 4) / 2, 2: (1 / 2 + 0) / 2}
    s = summary(results, mfr="reciprocal_of_mrr").iloc[0]
    assert s["MFR none"] == pytest.approx(1 / ((mrr[1] + mrr[2]) / 2)) and s["P@1 none"] == pytest.approx(0.25)
    d = detail(results, mfr="reciprocal_of_mrr").set_index("measure")
    assert d.loc["MFR", "mean"] == pytest.approx(1 / ((mrr[1] + mrr[2]) / 2))
    assert d.loc["MFR", "std"] == pytest.approx(np.std([1 / mrr[1], 1 / mrr[2]], ddof=1)) and d.loc["MFR", "seeds"] == 2
    finite = results[results.value < np.inf]
    assert summary(finite, mfr="arithmetic").iloc[0]["MFR none"] == pytest.approx(((1 + 4) / 2 + 2) / 2)
