"""The demo's extras beside the grid: each runs once, is cached in the store and prints its key lines."""

import pytest

from leakexp.runner.config import compose
from leakexp.cli.commands import demo_extras as extras
from leakexp.stages.registry import runner


@pytest.mark.slow  # the demo's audit and graph stages twice (about 25 s); make demo (CI) runs them
def test_demo_extras_are_cached_and_print_the_audit_lines(tmp_path):
    cfg = compose([f"store={tmp_path}", "data.queries_per_source=600"])
    r = runner(cfg)
    first = extras(r)
    computed = r.store.computed()
    assert sum(c.startswith("graph/synthetic/") for c in computed) == 1
    assert sum(c.startswith("audit/") for c in computed) == 1  # audit/<key>: one artifact of the toy world's pair
    assert extras(r) == first and r.store.computed() == computed  # the second run computes nothing
    assert extras(runner(cfg)) == first and r.store.computed() == computed  # nor does a new runner (a second demo)
    assert any(line.strip().startswith("a_parity_applicable: 0 of ") for line in first)  # vertex re-split
    overlap = next(line for line in first if line.startswith("query_overlap: "))
    assert int(overlap.split()[1]) > 0  # the toy world's planted leaks are found
    assert any(line.startswith("label_overlap: 0 of ") for line in first)  # disjoint document sets
    accuracies = [float(line.split(":")[1].split()[0]) for line in first if line.strip().startswith("a_parity_accuracy: 0.")]
    assert accuracies and min(accuracies) > 0.9  # the edge split leaks


def test_the_demos_pair_audit_embeds_each_text_list_once(tmp_path, monkeypatch):
    """Audit, decontamination and the two resamplings read the same training and test texts: two embeddings, not
    eight (the stage took 28 of the demo test's 41 s embedding them again)."""
    import numpy as np

    from leakexp.toolkit import audit
    from leakexp.runner.stage import Ask

    calls = []

    class Fake:
        def __init__(self, store, sbert, batch_size=256):
            pass

        def __call__(self, texts, name):
            calls.append(name)
            rng = np.random.default_rng(len(texts))
            x = rng.standard_normal((len(texts), 256)).astype(np.float32)  # nearly orthogonal
            return x / np.linalg.norm(x, axis=1, keepdims=True)

    monkeypatch.setattr(audit, "SbertEmbedder", Fake)
    r = runner(compose([f"store={tmp_path}", "data.queries_per_source=600"]))
    path = r.ensure(Ask.of("audit"))
    assert sorted(calls) == ["test", "train"]
    assert (path / "resample" / "resttest").is_dir() and (path / "decontaminate" / "removed.csv").is_file()
