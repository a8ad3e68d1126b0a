"""The demo's extras beside the grid: each runs once, is cached in the store and prints its key lines."""

import pytest

from leakexp.runner.registry import compose
from leakexp.cli.commands import demo_extras as extras
from leakexp.runner.registry import runner


@pytest.mark.slow  # the demo's audit and graph stages twice (about 25 s); make demo (CI) runs them
def test_demo_extras_are_cached_and_print_the_audit_lines(tmp_path):
    cfg = compose([f"store={tmp_path}", "data.queries_per_source=600"])
    r = runner(cfg)
    first = extras(r)
    computed = r.store.computed()
    assert sum(c.startswith("graph-audit/synthetic/") for c in computed) == 1
    assert sum(c.startswith("pair-audit/") for c in computed) == 1  # pair-audit/<key>: one artifact of the toy world's pair
    assert extras(r) == first and r.store.computed() == computed  # the second run computes nothing
    assert extras(runner(cfg)) == first and r.store.computed() == computed  # nor does a new runner (a second demo)
    assert any(line.strip().startswith("a_parity_applicable: 0 of ") for line in first)  # vertex re-split
    overlap = next(line for line in first if line.startswith("query_overlap: "))
    assert int(overlap.split()[1]) > 0  # the toy world's planted leaks are found
    assert any(line.startswith("label_overlap: 0 of ") for line in first)  # disjoint document sets
    accuracies = [float(line.split(":")[1].split()[0]) for line in first if line.strip().startswith("a_parity_accuracy: 0.")]
    assert accuracies and min(accuracies) > 0.9  # the edge split leaks


def test_the_demos_pair_audit_embeds_the_test_texts_once_and_reads_the_training_vectors_from_the_store(
        tmp_path, monkeypatch, seeded_store):
    """Audit, decontamination and the two resamplings read the same training and test texts: the test texts are
    embedded once, not four times (the stage took 28 of the demo test's 41 s embedding them again), and the training
    queries not at all: their vectors are the embed stage's, which detection reads too (the demo embedded its 4,000
    training queries twice)."""
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
            x = rng.standard_normal((len(texts), 384)).astype(np.float32)  # nearly orthogonal; MiniLM's dimension
            return x / np.linalg.norm(x, axis=1, keepdims=True)

    monkeypatch.setattr(audit, "SbertEmbedder", Fake)
    r = runner(compose([f"store={seeded_store(tmp_path)}", "data.queries_per_source=600"]))
    path = r.ensure(Ask.of("pair-audit"))
    assert calls == ["test"]
    assert not any(c.startswith("embed/") for c in r.store.computed())  # the stored embeddings, read
    assert (path / "resample" / "resttest").is_dir() and (path / "decontaminate" / "removed.csv").is_file()


def test_stored_vectors_serve_only_a_list_of_training_texts_they_cover_whole():
    import numpy as np

    from leakexp.stages.pair_audit import _Once

    calls = []

    def embed(texts, name):
        calls.append((name, len(texts)))
        return np.zeros((len(texts), 2), np.float32)

    once = _Once(embed, {"a": np.array([1, 0], np.float32), "b": np.array([0, 1], np.float32)})
    assert once(["b", "a", "b"], "train").tolist() == [[0, 1], [1, 0], [0, 1]] and calls == []
    once(["a", "c"], "train")  # a text without a stored vector: the list is embedded
    once(["a"], "test")  # the test side is always embedded (a test text equal to a training query included)
    assert calls == [("train", 2), ("test", 1)]
