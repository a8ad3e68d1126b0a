import pandas as pd

from leakexp.tables.paper import cv_latex, cv_table


def _summary():
    rows = []
    vals = {"duet": (0.201, 0.198, 0.224, True), "knrm": (0.194, 0.214, 0.309, False)}
    for m, (n, s, t, sig) in vals.items():
        for measure in ("nDCG@10", "MFR", "P@1"):
            for leakage, v in (("none", n), ("msm", s), ("test", t)):
                rows.append({"model": m, "measure": measure, "leakage": leakage,
                             "mean": v if measure != "MFR" else 3 - v, "significant": sig and leakage == "test"})
    return pd.DataFrame(rows)


def test_cv_table_marks_bold_dagger_and_swaps():
    table, marks, notes = cv_table(_summary(), ["duet", "knrm", "monot5"])
    t = table.set_index("Model")
    assert list(t.index) == ["Duet", "KNRM"]  # models without results are left out
    assert t.loc["Duet", "nDCG@10 None"] == "**0.201**"  # best None column
    assert t.loc["Duet", "nDCG@10 Test"] == "0.224†"  # significant, not best
    assert t.loc["KNRM", "nDCG@10 Test"] == "**0.309**"
    assert t.loc["KNRM", "nDCG@10 MSM"] == '<span style="color:red">**0.214**</span>'  # KNRM+MSM overtakes Duet
    assert t.loc["KNRM", "MFR None"] == "2.806" and t.loc["Duet", "MFR None"] == "**2.799**"  # lower is better
    assert any(n.startswith("nDCG@10: KNRM with MSM leakage (0.214) overtakes Duet") for n in notes)
    tex = cv_latex(marks, "Caption with_underscore", "tab:x")
    assert r"\textcolor{red}{\textbf{0.214}}" in tex and r"0.224$^\dagger$" in tex and r"with\_underscore" in tex
    assert r"\toprule" in tex and r"\bottomrule" in tex


def test_caption_names_the_folds_the_cross_validation_used():
    from leakexp.lib.stats import assign_folds
    from leakexp.tables.paper import cv_folds_text

    assert cv_folds_text(5, 250) == "five-fold cross-validation"
    assert cv_folds_text(10, 50) == "ten-fold cross-validation"
    # a corpus with fewer topics than evaluate.folds: one topic per fold, as assign_folds deals them
    assert len(set(assign_folds(["301", "302", "303"], 5).values())) == 3
    assert cv_folds_text(5, 3) == "three-fold cross-validation (one topic per fold: 3 topics for evaluate.folds=5)"
    assert cv_folds_text(12, 11) == "11-fold cross-validation (one topic per fold: 11 topics for evaluate.folds=12)"
