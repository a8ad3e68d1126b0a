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
    "build": "build the training sets of the grid (corpus x leakage x size); prints a summary "
             "(--export-monot5: also write the monoT5 text format)",
    "train": "train the model(s) of the given cell(s) (and whatever they lack upstream)",
    "rerank": "re-rank the BM25 top-100 of the cell(s)' corpus",
    "evaluate": "nDCG@10, P@1 and MFR of the cell(s)",
    "cell": "run one cell end to end (same as evaluate)",
    "grid": "run every cell of the configured grid, then write the tables",
    "demo": "the whole pipeline on the embedded toy world (experiment=demo), then the tables",
    "memorization": "scores and ranks of the leaked documents with vs without leakage (Tables 6-8); computes what "
                    "the store lacks, then writes the tables",
    "robustness": "robustness of the trained models with vs without leakage (Wu et al.: variance, OOD drop, query "
                  "attacks, document manipulation); computes what the store lacks, then writes the tables",
    "tables": "write the tables from the store alone (no training)",
    "status": "done / running / failed / missing artifacts of the configured grid per stage (exit 1 while incomplete)",
    "plan": "job counts, training instances, embedding size and estimated GPU-hours of the configured grid",
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
    p.store.require_writable("leakexp demo" if demo else "leakexp grid")
    robust = bool(cfg.robustness.get("enabled", False))
    if robust:
        from leakexp import robustness

        robustness.settings(cfg)  # bad settings fail before any work
    cells = grid_cells(cfg)
    failed = []
    for cell in tqdm(cells, desc="grid", unit="cell"):
        try:
            p.run_cell(cell)
        except Exception as exc:
            failed.append((cell, exc))
            log.error("cell %s failed: %s: %s", cell, type(exc).__name__, exc)
    if robust:  # robustness.enabled (the demo); otherwise on request: `leakexp robustness experiment=paper`
        failed += robustness.robust_all(p, robustness.robustness_cells(cfg))
    extra_lines = []
    if demo:
        from leakexp.demo import extras
        from leakexp.tables import write_table1, write_table2

        write_table1(cfg, p)
        write_table2(cfg, p)
        extra_lines = extras(cfg, p)
    out = write_tables(cfg)
    for line in extra_lines:
        print(line)
    print(f"{len(cells) - len(failed)}/{len(cells)} cells done in {time.time() - start:.1f}s")
    for cell, exc in failed:
        print(f"FAILED {cell}: {type(exc).__name__}: {exc}", file=sys.stderr)
    print(f"tables: {out}")
    return 1 if failed else 0


def cmd_memorization(overrides: list[str]) -> int:
    from leakexp import memorization
    from leakexp.pipeline import grid_cells
    from leakexp.tables import tables_dir

    cfg, p = _pipeline(overrides)
    p.store.require_writable("leakexp memorization")
    cells = grid_cells(cfg)
    _, failed = memorization.compute_all(p, cells)
    written = memorization.write_tables(cfg, p, tables_dir(cfg), cells, memorization.stored_cv_sizes(cfg, p, cells))
    for path in written:
        print(path)
    for cell, exc in failed:
        print(f"FAILED {cell}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 1 if failed else 0


def cmd_robustness(overrides: list[str]) -> int:
    from leakexp import robustness
    from leakexp.tables import tables_dir

    cfg, p = _pipeline(overrides)
    robustness.settings(cfg)  # bad settings fail before any work
    p.store.require_writable("leakexp robustness")
    cells = robustness.robustness_cells(cfg)
    failed = robustness.robust_all(p, cells)
    for path in robustness.write_tables(cfg, p, tables_dir(cfg), cells):
        print(path)
    for cell, exc in failed:
        print(f"FAILED {cell}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 1 if failed else 0


def cmd_tables(overrides: list[str]) -> int:
    from leakexp.config import compose
    from leakexp.store import Store
    from leakexp.tables import write_tables

    cfg = compose(overrides)
    Store(cfg.store, create=False).require_writable("leakexp tables")
    print(f"tables: {write_tables(cfg)}")
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
    from leakexp.tables import write_table1

    cfg, p = _pipeline(overrides)
    path = write_table1(cfg, p)
    print(f"{len(p.candidates())} candidate rows; threshold {cfg.detect.threshold}")
    print(path.read_text())
    print(f"table 1: {path.with_suffix('')}.{{md,csv,tex}}")
    return 0


def cmd_status(overrides: list[str], verify: bool = False) -> int:
    from leakexp.config import compose
    from leakexp.grid import complete, grid_status, render_status

    status = grid_status(compose(overrides), verify=verify)
    print(render_status(status))
    return 0 if complete(status) else 1


def cmd_plan(overrides: list[str]) -> int:
    from leakexp.plan import plan, render

    import pandas as pd

    from leakexp.pipeline import grid_cells
    from leakexp.store import atomic_write_text

    cfg, p = _pipeline(overrides)
    print(render(plan(cfg, p)))
    jobs = pd.DataFrame([vars(c) for c in grid_cells(cfg)])
    path = p.store.path("plan", f"{cfg.data.name}-jobs.tsv")
    atomic_write_text(path, jobs.to_csv(sep="\t", index=False))
    print(f"  job list ({len(jobs)} cells, one per line): {path}")
    return 0


def _corpus_topics(specs: list[str]) -> dict[str, list[str]]:
    from leakexp.data.files import read_topic_ids

    out = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"leakexp: --corpus expects NAME=TOPICS (a TREC topic file or a list of ids), got {spec!r}")
        out[name] = read_topic_ids(Path(path))
    return out


def cmd_annotations(args) -> int:
    import pandas as pd

    from leakexp import verify as v
    from leakexp.report import markdown_table, write_table
    from leakexp.store import atomic_write_text

    if args.action == "table2":
        ann = v.read_annotations([Path(f) for f in args.annotations])
        a, b = v.table2(ann, _corpus_topics(args.corpus))
        out = Path(args.out)
        write_table(a, out, "table2a", "Table 2 (a). Manually annotated leakage candidates: true and false "
                    "candidates as queries and topics per corpus.")
        write_table(b, out, "table2b", "Table 2 (b). Annotated query reformulation types (queries).")
        print(markdown_table(a))
        print(markdown_table(b))
        print(f"table 2: {out}")
        return 0
    if args.action == "kappa":
        k = v.kappa(v.read_annotations([Path(args.first)]), v.read_annotations([Path(args.second)]))
        print(f"candidates: {k['candidates']}")
        print(f"kappa_leak: {k['kappa_leak']:.4f}")
        print(f"kappa_type: {k['kappa_type']:.4f}")
        print(f"kappa_labels: {k['kappa_labels']:.4f}")
        return 0
    if args.action == "import":
        ann = v.read_annotations([Path(f) for f in args.annotations])
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, ids in _corpus_topics(args.corpus).items():
            leaks = v.verified_leaks(ann, ids)
            atomic_write_text(out / f"verified-{name}.csv",
                              leaks[["train_qid", "query", "topic_qid", "type", "similarity"]].to_csv(index=False))
            print(f"{name}: {len(leaks)} verified leaking queries for {leaks.topic_qid.nunique()} topics")
        print(f"verified leaks: {out}")
        return 0
    if args.action == "calibrate":
        ann = v.read_annotations([Path(f) for f in args.judged])
        threshold, curve = v.calibrate(ann, args.target)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "calibration.csv", curve.to_csv(index=False))
        _plot_calibration(curve, threshold, args.target, out / "calibration.png")
        print(f"{len(ann)} judged pairs; lowest threshold with precision >= {args.target}: "
              f"{'none' if threshold is None else f'{threshold:.4f}'}")
        print(f"curve: {out}/calibration.csv, {out}/calibration.png")
        return 0 if threshold is not None else 1
    # sample / review need the pipeline's candidates
    from leakexp import detect as d

    cfg, p = _pipeline(args.overrides)
    collections = [p.collection(c) for c in p.corpora]
    if args.action == "sample":
        pairs = d.leak_pairs(p.candidates(), args.lower)
        chosen = v.stratified_sample(pairs, n=args.n, lower=args.lower, seed=args.seed)
    else:
        pairs = d.leak_pairs(p.candidates(), float(cfg.detect.threshold))
        chosen = v.review_candidates(pairs, int(cfg.verify.review_top_k))
    labels = None
    if args.label_with_truth:
        if cfg.data.kind != "toy":
            raise SystemExit("leakexp: --label-with-truth needs the toy world (data=toy)")
        from leakexp.data.sources import toy_world

        truth = pd.read_csv(toy_world(p.store, cfg.data) / "truth" / "leaks.tsv", sep="\t", dtype=str)
        labels = v.truth_labels(chosen, truth)
    records = v.to_annotation_records(chosen, collections, labels)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(args.out), "".join(__import__("json").dumps(r) + "\n" for r in records))
    print(f"{len(records)} candidates for annotation: {args.out}")
    return 0


def _plot_calibration(curve, threshold, target, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(curve.threshold, curve.precision, label="precision")
    ax.plot(curve.threshold, curve.recall, label="recall")
    ax.axhline(target, color="grey", lw=0.8, ls="--")
    if threshold is not None:
        ax.axvline(threshold, color="black", lw=0.8, ls=":", label=f"threshold {threshold:.3f}")
    ax.set_xlabel("similarity threshold (pairs with similarity > t)")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=150)
    plt.close(fig)
    tmp.replace(path)


def cmd_verify(overrides: list[str]) -> int:
    cfg, p = _pipeline(overrides)
    ann = p.annotations()
    print(f"{len(ann)} annotated candidates, {int(ann.leak.sum())} true leaks")
    if cfg.data.kind == "toy":
        q = p.detection_quality()
        print(f"detection vs planted leaks at threshold {cfg.detect.threshold}: recall {q['recall']:.3f} "
              f"precision {q['precision']:.3f} ({q['true_positives']} of {q['planted']} planted, "
              f"{q['candidates']} candidate pairs)")
    for c in p.corpora:
        leaks = p.verified_leaks(c)
        print(f"{c}: {len(leaks)} verified leaking queries for {leaks.topic_qid.nunique()} topics")
    from leakexp.tables import write_table2

    print(f"table 2: {write_table2(cfg, p).parent}/table2{{a,b}}.{{md,csv,tex}}")
    return 0


def cmd_build(overrides: list[str], export: bool = False) -> int:
    import pandas as pd

    from leakexp.report import markdown_table
    from leakexp.store import read_json

    cfg, p = _pipeline(overrides)
    from leakexp.build import export_monot5

    rows = []
    for corpus in cfg.grid.corpora:
        for leakage in cfg.grid.leakages:
            for size in cfg.grid.sizes:
                path = p.training_set(corpus, leakage, int(size))
                m = read_json(path / "manifest.json")
                row = {"corpus": corpus, "leakage": leakage, "size": int(size), "instances": m["instances"],
                       "leaked": m["leaked_instances"], "ratio": float(m["leakage_ratio"])}
                for source in ("msmarco", "orcas", "test"):
                    row[source] = int(m["by_source"].get(source, 0))
                rows.append(row)
                if export:
                    target = p.store.path("exports", "monot5", corpus, leakage, f"{size}.tsv")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    tmp = target.with_name(f".{target.name}.tmp")
                    export_monot5(pd.read_parquet(path / "instances.parquet"), tmp)
                    tmp.replace(target)
    print(markdown_table(pd.DataFrame(rows), floatfmt="{:.4f}"))
    if export:
        print(f"monoT5 text exports: {p.store.path('exports', 'monot5')}")
    return 0


def cmd_graph_audit(args) -> int:
    from leakexp.graph import audit_command

    return audit_command(edges=args.edges, wordnet=args.wordnet, pos=args.pos, split_by=args.split_by,
                         resplit=args.resplit, proportions=args.proportions, seed=args.seed,
                         train_split=args.train_split, antonym_labels=args.antonym_label,
                         columns=args.columns, out=args.out)
# -- any train/test pair: audit, decontaminate, resample, split-eval ---------------------------------------------
PAIR_COMMANDS = {
    "audit": "query (SBERT), lexical and label overlap of any train/test pair; writes a report",
    "decontaminate": "the training queries without those similar to a test query (DuReader-retrieval), as local files",
    "resample": "ReSTrain / ReSTTest qrels for interpolation vs extrapolation (extrapolate-eval)",
    "split-eval": "re-score TREC runs on an audit's leaked vs other test queries, with paired t-tests",
}
_OVERRIDE_KEYS = {"store", "experiment", "device", "verbose", "seed"}


def _add_pair_arguments(sp, name: str) -> None:
    sp.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. store=/tmp/s detect.threshold=0.91")
    sp.add_argument("--train", nargs="+", default=[], metavar="SPEC",
                    help="training queries: ir_datasets ids or files (TSV qid<TAB>text or TREC topics), NAME=... to name one")
    sp.add_argument("--test", nargs="+", default=[], metavar="SPEC", help="test queries, as --train")
    sp.add_argument("--train-qrels", nargs="+", default=[], metavar="FILE",
                    help="qrels of the local training files (one per file, or one for all)")
    sp.add_argument("--test-qrels", nargs="+", default=[], metavar="FILE", help="qrels of the local test files")
    sp.add_argument("--fields", nargs="+", default=["title"], choices=["title", "description", "variant"],
                    help="test fields to compare (a plain query's text is its title)")
    sp.add_argument("--test-variants", nargs="+", default=[], metavar="FILE", help="query variants TSV (qid<TAB>text)")
    sp.add_argument("--model", help="SBERT model name or path (default: detect.sbert)")
    sp.add_argument("--k", type=int, help="nearest training queries per test text (default: detect.k)")
    sp.add_argument("--threshold", type=float, help="similarity threshold (default: detect.threshold)")
    sp.add_argument("--train-rel", type=int, default=1, help="training label counted as relevant (>=)")
    sp.add_argument("--test-rel", type=int, default=1, help="test label counted as relevant (>=)")
    sp.add_argument("--out", required=True, help="output directory")
    if name == "audit":
        sp.add_argument("--ngrams", nargs="+", type=int, default=[13, 3], help="word n-gram sizes (13: lm-eval's rule)")
    if name == "decontaminate":
        sp.add_argument("--by-label", action="store_true", help="also remove training queries sharing a relevant document")
        sp.add_argument("--docs", help="training documents, for the data.yaml written with the result")
    if name == "restrain":
        sp.add_argument("--sizes", nargs="+", type=int, default=[], help="training set sizes (queries)")
        sp.add_argument("--extrapolation-threshold", type=float, help="default: --threshold")
    if name == "resttest":
        sp.add_argument("--buckets", type=int, default=5, help="K")
        sp.add_argument("--sample", type=int, default=100_000, help="k-means training sample")
    if name in ("restrain", "resttest"):
        sp.add_argument("--seed", type=int, default=0)


def _add_pair_commands(sub) -> None:
    for name in ("audit", "decontaminate"):
        _add_pair_arguments(sub.add_parser(name, help=PAIR_COMMANDS[name], description=PAIR_COMMANDS[name]), name)
    rs = sub.add_parser("resample", help=PAIR_COMMANDS["resample"], description=PAIR_COMMANDS["resample"])
    rsub = rs.add_subparsers(dest="method", required=True, metavar="method")
    _add_pair_arguments(rsub.add_parser("restrain", help="interpolation / extrapolation training sets of given sizes"),
                        "restrain")
    _add_pair_arguments(rsub.add_parser("resttest", help="K buckets: train on K-1, test interpolation / extrapolation"),
                        "resttest")
    sp = sub.add_parser("split-eval", help=PAIR_COMMANDS["split-eval"], description=PAIR_COMMANDS["split-eval"])
    sp.add_argument("runs", nargs="+", metavar="RUN", help="TREC run files (NAME=PATH to name one)")
    sp.add_argument("--qrels", required=True, help="TREC qrels of the test queries")
    sp.add_argument("--audit", required=True, help="an audit's output directory")
    sp.add_argument("--leaked-by", default="semantic", choices=["semantic", "exact", "label", "any"])
    sp.add_argument("--source", help="the audit's test source the runs belong to (when qids repeat across sources)")
    sp.add_argument("--measures", nargs="+", help="default: evaluate.measures")
    sp.add_argument("--baseline", help="run compared with the others (default: the first)")
    sp.add_argument("--out", help="output directory (default: AUDIT/split-eval)")


def _pair_kwargs(args) -> dict:
    """The shared inputs of audit/decontaminate/resample, with defaults from the config's detect.*"""
    from leakexp.audit import AuditOptions
    from leakexp.config import compose

    overrides = list(args.overrides)
    for side in ("train", "test"):  # an override typed after --train/--test lands in its list
        specs = []
        for v in getattr(args, side):
            key = v.partition("=")[0]
            (overrides if "=" in v and ("." in key or key in _OVERRIDE_KEYS) else specs).append(v)
        setattr(args, side, specs)
    cfg = compose(overrides)
    d = cfg.detect
    options = AuditOptions(k=args.k or int(d.k), threshold=float(d.threshold if args.threshold is None else args.threshold),
                           ngrams=tuple(getattr(args, "ngrams", (13, 3))), train_rel=args.train_rel, test_rel=args.test_rel)
    return dict(train=args.train, test=args.test, train_qrels=args.train_qrels, test_qrels=args.test_qrels,
                fields=args.fields, test_variants=args.test_variants, out=Path(args.out), store=Path(cfg.store),
                sbert=args.model or str(d.sbert), batch_size=int(d.batch_size), options=options)


def cmd_pair(args) -> int:
    from leakexp import audit, resample
    from leakexp.data.sources import DataUnavailable
    from leakexp.report import markdown_table

    try:
        if args.command == "split-eval":
            from leakexp.config import compose

            e = compose([]).evaluate
            table = audit.run_split_eval(args.runs, qrels=Path(args.qrels), audit_dir=Path(args.audit),
                                         measures=args.measures or list(e.measures), baseline=args.baseline,
                                         leaked_by=args.leaked_by, source=args.source,
                                         out=Path(args.out) if args.out else None, mfr_missing=str(e.mfr_missing))
            print(markdown_table(table, floatfmt="{:.4f}"))
            print(f"split-eval: {Path(args.out) if args.out else Path(args.audit) / 'split-eval'}/split_eval.{{md,csv,tex}}")
            return 0
        kwargs = _pair_kwargs(args)
        if args.command == "audit":
            print(audit.format_summary(audit.run_audit(**kwargs)))
            print(f"report: {kwargs['out'] / 'report.md'}")
        elif args.command == "decontaminate":
            f = resample.run_decontaminate(**kwargs, by_label=args.by_label, docs=args.docs)
            print(f"removed: {f['removed']} of {f['train_queries']} training queries "
                  f"({f['removed_similarity']} above {f['threshold']:g}, {f['removed_label_only']} by label only)")
            print(f"decontaminated data: {kwargs['out']} (removed.csv lists each removal)")
        else:
            extra = (dict(sizes=args.sizes, extrapolation_threshold=args.extrapolation_threshold)
                     if args.method == "restrain" else dict(buckets=args.buckets, sample=args.sample))
            table = resample.run_resample(args.method, **kwargs, seed=args.seed, **extra)
            print(markdown_table(table, floatfmt="{:.4f}"))
            print(f"{args.method}: {kwargs['out'] / args.method}")
        return 0
    except (ValueError, DataUnavailable) as exc:
        print(f"leakexp: {exc}", file=sys.stderr)
        return 2


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
        if name == "build":
            sp.add_argument("--export-monot5", action="store_true",
                            help="also write each set in the monoT5 text format under <store>/exports/monot5/")
        if name == "status":
            sp.add_argument("--verify", action="store_true",
                            help="also re-read every finished artifact's files against their recorded checksums")
    ann = sub.add_parser("annotations", help="sample / review candidates for annotation; import, calibrate, "
                         "Table 2 and Cohen's kappa from annotation files (the study's JSONL format)")
    asub = ann.add_subparsers(dest="action", required=True, metavar="action")
    a = asub.add_parser("sample", help="stratified sample of query-topic pairs above a lower bound (JSONL)")
    a.add_argument("overrides", nargs="*")
    a.add_argument("--out", required=True)
    a.add_argument("--n", type=int, default=100, help="pairs to sample (paper: 100)")
    a.add_argument("--lower", type=float, default=0.8, help="similarity lower bound (paper: 0.8)")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--label-with-truth", action="store_true", help="toy world: let the ground truth annotate")
    a = asub.add_parser("review", help="top-k candidates per topic above the threshold, for annotation (JSONL)")
    a.add_argument("overrides", nargs="*")
    a.add_argument("--out", required=True)
    a.add_argument("--label-with-truth", action="store_true", help="toy world: let the ground truth annotate")
    a = asub.add_parser("calibrate", help="lowest threshold with precision >= target on judged pairs")
    a.add_argument("--judged", nargs="+", required=True)
    a.add_argument("--target", type=float, default=0.9)
    a.add_argument("--out", required=True)
    for action, help_text in (("import", "verified leaks per corpus as CSV"), ("table2", "Table 2 (a) and (b)")):
        a = asub.add_parser(action, help=help_text)
        a.add_argument("--annotations", nargs="+", required=True)
        a.add_argument("--corpus", action="append", required=True, metavar="NAME=TOPICS")
        a.add_argument("--out", required=True)
    a = asub.add_parser("kappa", help="Cohen's kappa between two annotators' files")
    a.add_argument("first")
    a.add_argument("second")
    g = sub.add_parser("graph-audit", help="A-leakage audit of a graph benchmark split on edges (paths between "
                       "held-out pairs in the training graph, A-parity heuristic, reverse edges, vertex re-split)")
    g.add_argument("edges", nargs="*", help="edge files: PATH (head TAB tail TAB label TAB split) or SPLIT=PATH "
                   "(head TAB tail TAB label); none: the seeded synthetic graph (or --wordnet)")
    g.add_argument("--wordnet", nargs="?", const="/usr/share/wordnet", metavar="DIR",
                   help="build the synonym/antonym benchmark from WordNet 3.0 (default DIR /usr/share/wordnet)")
    g.add_argument("--pos", default="adj", choices=["adj", "noun", "verb", "adv"], help="WordNet part of speech")
    g.add_argument("--split-by", default="edges", choices=["edges", "vertices", "components"],
                   help="how a built benchmark is split (edges: the standard construction)")
    g.add_argument("--resplit", choices=["vertices", "components"], help="also write and audit a vertex-disjoint split")
    g.add_argument("--proportions", default="0.70,0.05,0.25", help="train,val,test shares (paper: 0.70,0.05,0.25)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--train-split", default="train")
    g.add_argument("--antonym-label", action="append", help="label(s) meaning antonym (default: antonym, 1)")
    g.add_argument("--columns", default="head,tail,label",
                   help="order of the first three fields (WN18: head,label,tail)")
    g.add_argument("--out", help="report folder (default <LEAKEXP_STORE or store>/graph/<name>)")
    _add_pair_commands(sub)
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    from leakexp.config import ConfigError

    handlers = {
        "toy": cmd_toy, "index": cmd_index, "detect": cmd_detect, "verify": cmd_verify, "build": cmd_build,
        "tables": cmd_tables, "memorization": cmd_memorization, "robustness": cmd_robustness, "plan": cmd_plan, "status": cmd_status, "annotations": cmd_annotations,
        "grid": lambda o: cmd_grid(o), "demo": lambda o: cmd_grid(o, demo=True),
        "train": lambda o: cmd_cells("train", o), "rerank": lambda o: cmd_cells("rerank", o),
        "evaluate": lambda o: cmd_cells("evaluate", o), "cell": lambda o: cmd_cells("evaluate", o),
    }
    from leakexp.data.files import DataFormatError
    from leakexp.store import StoreError
    from leakexp.tables import NoResults

    try:
        if args.command in PAIR_COMMANDS:
            return cmd_pair(args)
        if args.command == "annotations":
            return cmd_annotations(args)
        if args.command == "graph-audit":
            return cmd_graph_audit(args)
        if args.command == "build":
            return cmd_build(args.overrides, export=args.export_monot5)
        if args.command == "status":
            return cmd_status(args.overrides, verify=args.verify)
        return handlers[args.command](args.overrides)
    except KeyboardInterrupt:
        print("\nleakexp: interrupted; re-run the same command to resume (finished artifacts are kept)",
              file=sys.stderr)
        return 130
    except ConfigError as exc:
        print(f"leakexp: config error: {exc}", file=sys.stderr)
        return 2
    except (DataFormatError, FileNotFoundError, StoreError) as exc:
        print(f"leakexp: {exc}", file=sys.stderr)
        return 2
    except NoResults as exc:
        print(f"leakexp: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
