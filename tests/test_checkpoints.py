"""A trained checkpoint outside leakexp: docs/models.md's blocks for monoT5 in pyterrier-t5 and monoBERT in plain
transformers run as written (their checkpoint path replaced by one leakexp saved) and score as leakexp does."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from leakexp.models import REGISTRY, load_checkpoint
from leakexp.lib.trainer import set_seed

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["lyme", "tick", "ferry", "ship", "jazz", "festival", "hubble", "telescope"]


def models_block(library: str) -> str:
    """The ```python block of docs/models.md's Checkpoints section that imports ``library``."""
    text = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
    section = text.split("\n## Checkpoints\n", 1)[1].split("\n## ", 1)[0]
    blocks = [b for b in re.findall(r"^```python\n(.*?)^```$", section, flags=re.S | re.M) if library in b]
    assert len(blocks) == 1, library
    return blocks[0]


def run_block(code: str, checkpoint: Path, **given) -> dict:
    """``code`` with its ``checkpoint = "…"`` line pointing at ``checkpoint``, run with ``given`` defined."""
    line = re.search(r'^checkpoint = "[^"]+".*$', code, flags=re.M)
    assert line, code
    code = code.replace(line.group(0), f"checkpoint = {str(checkpoint)!r}")
    namespace = dict(given)
    exec(compile(code, "docs/models.md", "exec"), namespace)
    return namespace


def test_monobert_block_scores_as_leakexp_also_past_max_length(tiny_bert, tmp_path):
    set_seed(0)
    model = REGISTRY["monobert"](checkpoint=tiny_bert, max_length=32)
    model.save(tmp_path / "bert")
    queries = ["lyme tick", "jazz festival lineup"]
    documents = ["the lyme and the tick report", " ".join(WORDS * 20)]  # the second far past 32 pieces
    ns = run_block(models_block("transformers"), tmp_path / "bert", queries=queries, documents=documents)
    ours = load_checkpoint(tmp_path / "bert").score(queries, documents)
    assert ns["scores"].tolist() == pytest.approx(ours, abs=1e-5)
    assert ns["batch"]["input_ids"].shape[1] == 32  # the long pair was cut to max_length


def test_monot5_block_loads_in_pyterrier_t5_and_scores_as_leakexp(tmp_path):
    from leakexp.models.monot5 import train_embedded_tokenizer

    texts = [f"the {a} and the {b} report weather sports market news" for a in WORDS for b in WORDS] * 3
    tokenizer = train_embedded_tokenizer(texts, tmp_path / "tok", vocab_size=200)
    set_seed(0)
    REGISTRY["monot5"](checkpoint=str(tokenizer), max_length=64).save(tmp_path / "t5")
    run = pd.DataFrame({"qid": ["1", "1", "2"], "query": ["lyme tick", "lyme tick", "ferry ship"],
                        "docno": ["a", "b", "c"], "text": ["the lyme and the tick report", "weather news",
                                                          "the ferry and the ship report"]})
    ns = run_block(models_block("pyterrier_t5"), tmp_path / "t5", run=run)
    theirs = ns["scored"].set_index("docno").score
    ours = pd.Series(load_checkpoint(tmp_path / "t5").score(run["query"].tolist(), run["text"].tolist()),
                     index=run.docno)
    assert (theirs.loc[ours.index] - ours).abs().max() < 1e-4
