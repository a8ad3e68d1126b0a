"""The pipeline's stages, one class each (``leakexp.runner.stage.Stage``), registered where it is declared, in a
module named after the stage or its family. The runner finds every module of this package; ``PIPELINE`` lists them in
the order data flows through them, the order ``leakexp --help``, ``status`` and ``stages`` show their stages in (a
module it does not name comes after them)."""

PIPELINE = ("toy", "sources", "corpus_stats", "index", "firststage", "detect", "verify", "build", "df", "t5vocab",
            "tokens", "train", "rerank", "evaluate", "memorization", "robustness.perturbations", "robustness.parts",
            "pair_audit", "graph_audit")
