"""``leakexp``: the command line. Every command takes Hydra overrides (``key=value``) after its name.

Examples::

    leakexp demo                                   # the whole pipeline on the toy world
    leakexp cell corpus=toy_core17 leakage=msm size=512 seed=2
    leakexp train experiment=paper corpus=robust04 leakage=msm size=16000 model=monot5 seed=3
    leakexp train model=knrm seed=1,2              # comma lists run every combination
    leakexp tables experiment=paper                # the tables, from the store alone
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import sys
import time
from pathlib import Path

STAGES = {
    "toy": "generate the toy world into the store and print where it is",
    "index": "build the PISA BM25 indexes of the training pool and every test corpus",
    "detect": "SBERT + Faiss leakage candidates; prints Table 1 counts",
    "verify": "review the top candidates per topic and import annotations; prints verified leaks per corpus",
    "build": "build the training sets of the grid (corpus x leakage x size); prints a summary",
    "train": "train the model(s) of the given cell(s) (and whatever they lack upstream)",
    "rerank": "re-rank the BM25 top-100 of the cell(s)' corpus",
    "evaluate": "nDCG@10, P@1 and MFR of the cell(s)",
    "cell": "run one cell end to end (same as evaluate)",
    "grid": "run every cell of the configured grid, then write the tables",
    "demo": "the whole pipeline on the embedded toy world (experiment=demo), then the tables",
    "tables": "write the tables from the store alone (no training)",
}
CELL_KEYS = ("corpus", "leakage", "size", "model", "seed")

log = logging.getLogger("leakexp")


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("leakexp").setLevel(logging.INFO)
    for noisy in ("ir_datasets", "sentence_transformers", "transformers", "faiss", "pyterrier", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def expand_sweeps(overrides: list[str]) -> list[list[str]]:
    """Comma lists (``seed=1,2``) and ranges become one override list per combination (Hydra's parser)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    axes = []
    for o in parsed:
        key = o.get_key_element()
        if o.is_sweep_override():
            axes.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            axes.append([o.input_line])
    return [list(combo) for combo in itertools.product(*axes)] or [[]]


def _pipeline(overrides: list[str]):
    from leakexp.config import compose
    from leakexp.pipeline import Pipeline

    cfg = compose(overrides)
    return cfg, Pipeline(cfg)


def cmd_cells(stage: str, overrides: list[str]) -> int:
    from leakexp.pipeline import cell_from_config

    failures = 0
    for combo in expand_sweeps(overrides):
        cfg, p = _pipeline(combo)
        cell = cell_from_config(cfg)
        start = time.time()
        try:
            if stage == "train":
                out = p.trained(cell)
            elif stage == "rerank":
                out = p.reranked(cell)
            else:
                means = p.run_cell(cell)
                out = "  ".join(f"{m}={v:.4f}" for m, v in sorted(means.items()))
        except Exception as exc:  # one failed cell must not stop the others
            failures += 1
            print(f"FAILED {cell}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        print(f"{cell}: {out}  ({time.time() - start:.1f}s)")
    return 1 if failures else 0


def cmd_grid(overrides: list[str], *, demo: bool = False) -> int:
    from tqdm.auto import tqdm

    from leakexp.pipeline import grid_cells
    from leakexp.tables import write_tables

    start = time.time()
    cfg, p = _pipeline((["experiment=demo"] if demo else []) + overrides)
    cells = grid_cells(cfg)
    failed = []
    for cell in tqdm(cells, desc="grid", unit="cell"):
        try:
            p.run_cell(cell)
        except Exception as exc:
            failed.append((cell, exc))
            log.error("cell %s failed: %s: %s", cell, type(exc).__name__, exc)
    out = write_tables(cfg)
    print(f"{len(cells) - len(failed)}/{len(cells)} cells done in {time.time() - start:.1f}s")
    for cell, exc in failed:
        print(f"FAILED {cell}: {type(exc).__name__}: {exc}", file=sys.stderr)
    print(f"tables: {out}")
    return 1 if failed else 0


def cmd_tables(overrides: list[str]) -> int:
    from leakexp.config import compose
    from leakexp.tables import write_tables

    print(f"tables: {write_tables(compose(overrides))}")
    return 0


def cmd_toy(overrides: list[str]) -> int:
    from leakexp.data.sources import toy_world

    cfg, p = _pipeline(overrides)
    print(toy_world(p.store, cfg.data))
    return 0


def cmd_index(overrides: list[str]) -> int:
    cfg, p = _pipeline(overrides)
    for name in ["train", *p.corpora]:
        path = p.index(name)
        print(f"{name}: {path} ({p.store.marker(path).figures['documents']} documents)")
    return 0


def cmd_detect(overrides: list[str]) -> int:
    from leakexp.detect import table1
    from leakexp.report import markdown_table

    cfg, p = _pipeline(overrides)
    cands = p.candidates()
    corpora = {c: list(p.collection(c).topics) for c in p.corpora}
    t = table1(cands, corpora, float(cfg.detect.threshold))
    print(f"{len(cands)} candidate rows; threshold {cfg.detect.threshold}")
    print(markdown_table(t))
    return 0


def cmd_verify(overrides: list[str]) -> int:
    cfg, p = _pipeline(overrides)
    ann = p.annotations()
    print(f"{len(ann)} annotated candidates, {int(ann.leak.sum())} true leaks")
    for c in p.corpora:
        leaks = p.verified_leaks(c)
        print(f"{c}: {len(leaks)} verified leaking queries for {leaks.topic_qid.nunique()} topics")
    return 0


def cmd_build(overrides: list[str]) -> int:
    import pandas as pd

    from leakexp.report import markdown_table
    from leakexp.store import read_json

    cfg, p = _pipeline(overrides)
    rows = []
    for corpus in cfg.grid.corpora:
        for leakage in cfg.grid.leakages:
            for size in cfg.grid.sizes:
                m = read_json(p.training_set(corpus, leakage, int(size)) / "manifest.json")
                rows.append({"corpus": corpus, "leakage": leakage, "size": int(size), "instances": m["instances"],
                             "leaked": m["leaked_instances"], "ratio": m["leakage_ratio"],
                             **{f"{k}": v for k, v in m["by_source"].items()}})
    print(markdown_table(pd.DataFrame(rows).fillna(0), floatfmt="{:.4f}"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="leakexp",
        description="Measure how train-test leakage affects neural re-rankers. Each command takes Hydra "
                    "overrides such as experiment=paper corpus=robust04 leakage=msm size=16000 model=knrm seed=3.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="stages, in pipeline order:\n" + "\n".join(f"  {k:<9} {v}" for k, v in STAGES.items()),
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what each stage reads and writes")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    for name, help_text in STAGES.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        sp.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. corpus=toy_core17 seed=2")
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    from leakexp.config import ConfigError

    handlers = {
        "toy": cmd_toy, "index": cmd_index, "detect": cmd_detect, "verify": cmd_verify, "build": cmd_build,
        "tables": cmd_tables,
        "grid": lambda o: cmd_grid(o), "demo": lambda o: cmd_grid(o, demo=True),
        "train": lambda o: cmd_cells("train", o), "rerank": lambda o: cmd_cells("rerank", o),
        "evaluate": lambda o: cmd_cells("evaluate", o), "cell": lambda o: cmd_cells("evaluate", o),
    }
    try:
        return handlers[args.command](args.overrides)
    except ConfigError as exc:
        print(f"leakexp: config error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
