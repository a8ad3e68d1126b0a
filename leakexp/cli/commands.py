"""What each ``leakexp`` command does: thin calls into the capability modules, and what they print.

The command line (``leakexp.cli.main``) parses and dispatches to these functions; each returns an exit code
(0 done, 1 a failed or incomplete run, 2 bad input).
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from pathlib import Path

from leakexp.cli.plan import plan, render_plan
from leakexp.data.files import DataUnavailable, read_topic_ids
from leakexp.lib.report import markdown_table, plot_calibration, write_table
from leakexp.lib.trec import read_run, run_overlap
from leakexp.runner.config import ConfigError, section_keys, top_level_keys
from leakexp.runner.loop import each
from leakexp.runner.stage import Ask, stages
from leakexp.runner.store import Store, atomic_write_text, read_json
from leakexp.grid import overview, preflight
from leakexp.grid.preflight import MissingInputs
from leakexp.lib import candidates as d
from leakexp.toolkit import annotations
from leakexp.stages.cell import cell_from_config, grid_cells
from leakexp.data.statistics import corpus_figures
from leakexp.stages.firststage import first_stage_file
from leakexp.stages.sources import pool_source
from leakexp.data.judgments import run_path
from leakexp.grid.work import (cell_workers, complete, demo_asks, grid_jobs, grid_status, lineage, render_status,
                               run_cell, run_job, run_job_in_worker, scheduler_notes)
from leakexp.runner.registry import check_requirements, compose, runner
from leakexp.stages.robustness.family import robustness_cells, robustness_settings
from leakexp.stages.build import check_size
from leakexp.lib.training_sets import export_monot5, training_queries
from leakexp.tables import memorization as memorization_tables, robustness as robustness_tables
from leakexp.tables.paper import tables_out, write_table1, write_table2, write_tables
from leakexp.toolkit import audit, graph, resample, split_eval
from leakexp.toolkit.audit import PAPER_DEFAULTS, PAPER_DEFAULTS_SOURCE, AuditOptions
from leakexp.toolkit.graph import audit_command

log = logging.getLogger("leakexp")
_OVERRIDE_KEYS = {"store", "experiment", "device", "verbose", "seed"}


def _runner(overrides: list[str], needs: tuple[str, ...] | None = None):
    """The config and runner of a computing command; ``needs``: the stages whose requirements (annotations,
    models in the Hugging Face cache) must be met before any work (None: every stage, as a grid cell needs)."""
    s = compose(overrides)
    return s, runner(s, needs=needs)


def expand_sweeps(overrides: list[str]) -> list[list[str]]:
    """Comma lists (``seed=1,2``) and ranges become one override list per combination (Hydra's parser)."""
    import itertools

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


def cmd_stage(name: str, overrides: list[str], **options) -> int:
    """``leakexp <name>``, the command of a stage or a family of stages (``Stage.help``): the artifacts the configured
    grid asks of it (``Stage.asks``), computed where the store lacks them with what they need upstream, then what
    the command prints (:data:`REPORTS`; by default each artifact's folder). A stage that computes per cell
    (``Stage.per_cell``: train, rerank, evaluate) computes the cells the command line names, one per combination of
    comma lists. A failing artifact is named and the others go on (exit 1)."""
    if name in INSTEAD:  # a stage whose command is another thing than computing its artifacts
        return INSTEAD[name](overrides)
    overrides = [*overrides, *SETS.get(name, ())]
    family = [st for st in stages() if st.family == name]
    per_cell = any(st.per_cell for st in family)
    configs = [compose(combo) for combo in (expand_sweeps(overrides) if per_cell else [overrides])]
    for s in configs if per_cell else []:  # bad settings stop before any work, so does a set the pool cannot fill
        check_size(s, s.corpus.name, s.leakage.name, s.run.size, f"size={s.run.size}")
    if per_cell:  # every input the cells lack, in one report, before any work
        refuse_missing(configs[0], overrides, [cell_from_config(s) for s in configs])
    work = []
    for s in configs:
        reader = runner(s, readonly=True)
        cells = [cell_from_config(s)] if per_cell else grid_cells(s)
        asks = [a for st in family for a in st.asks(reader, cells)]
        # what the artifacts need from outside (annotations, models in the cache), before any work: their stages'
        check_requirements(s, needs={u.stage for a in asks for u in reader.upstream(a)},
                           models={c.model for c in cells} if per_cell else None)
        r = runner(s, files=False)
        r.store.require_writable(f"leakexp {name}")
        work.append((r, cells, asks))
    report = REPORTS.get(name, report_folders)
    failures = 0
    for r, cells, asks in work:
        start = time.time()
        failed = each(asks, r.ensure, desc=name, unit="artifact", progress=not per_cell,
                      failed=lambda ask, exc, r=r: print(f"FAILED {_shown(r, ask)}: {type(exc).__name__}: {exc}",
                                                         file=sys.stderr))
        failures += len(failed)
        report(r, [a for a in asks if a not in {f for f, _ in failed}], cells, {**options, "started": start})
    return 1 if failures else 0


def _shown(r, ask: Ask) -> str:
    """An artifact as the store names it (its folder), or its request where it has none."""
    path = r.path(ask)
    return str(path.relative_to(r.store.root)) if path is not None else str(ask)


def report_folders(r, asks: list[Ask], cells, options) -> None:
    """Each artifact's folder, one a line."""
    for ask in asks:
        print(r.path(ask))


def report_indexes(r, asks: list[Ask], cells, options) -> None:
    """Each index with its documents, and the corpora whose first stage is a bundled or file run (no index)."""
    for ask in asks:
        path = r.path(ask)
        print(f"{ask.params['name']}: {path} ({r.store.marker(path).figures['documents']} documents)")
    built = {a.params["name"] for a in asks}
    for corpus in dict.fromkeys(r.settings.grid.corpora):
        run = first_stage_file(r.settings.rerank.first_stage, corpus)
        if corpus not in built and run is not None:
            print(f"{corpus}: no index needed (its first stage is the run {run.name})")


def report_candidates(r, asks: list[Ask], cells, options) -> None:
    """The candidates' count and Table 1."""
    path = write_table1(r.settings, r)
    print(f"{len(r.get(Ask.of('detect')))} candidate rows; threshold {r.settings.detect.threshold}")
    print(path.read_text())
    print(f"table 1: {path.with_suffix('')}.{{md,csv,tex}}")


def report_leaks(r, asks: list[Ask], cells, options) -> None:
    """The annotated candidates, detection against the toy world's planted leaks, each corpus's verified leaks,
    Table 2."""
    s = r.settings
    ann = r.get(Ask.of("verify"))
    print(f"{len(ann)} annotated candidates, {int(ann.leak.sum())} true leaks")
    source = pool_source(s.data)
    if source.made_by:  # a generated world: detection against the leaks it planted
        from leakexp.toolkit.annotations import detection_quality

        truth = source.planted_leaks(r.ensure(Ask.of(source.made_by)))
        q = detection_quality(d.leak_pairs(r.get(Ask.of("detect")), s.detect.threshold), truth)
        print(f"detection vs planted leaks at threshold {s.detect.threshold}: recall {q['recall']:.3f} "
              f"precision {q['precision']:.3f} ({q['true_positives']} of {q['planted']} planted, "
              f"{q['candidates']} candidate pairs)")
    for c in s.data.corpora:  # Table 2 (a)'s true candidates: a query verified for two topics leaks for each
        leaks = r.get(Ask.of("leaks", corpus=c))
        print(f"{c}: {len(leaks)} verified leaking queries for {leaks.topic_qid.nunique()} topics "
              f"({len(training_queries(leaks))} distinct training queries)")
    print(f"table 2: {write_table2(s, r).parent}/table2{{a,b}}.{{md,csv,tex}}")


def report_sets(r, asks: list[Ask], cells, options) -> None:
    """A summary of the training sets (``--export-monot5``: each also in the monoT5 text format)."""
    import pandas as pd

    rows = []
    for ask in dict.fromkeys(asks):  # per corpus of the grid, the No-Leakage set (one for every corpus) included
        path, p = r.path(ask), ask.params
        m = read_json(path / "manifest.json")
        row = {"corpus": p["corpus"], "leakage": p["leakage"], "size": int(p["size"]), "instances": m["instances"],
               "leaked": m["leaked_instances"], "ratio": float(m["leakage_ratio"])}
        for source in ("msmarco", "orcas", "test"):
            row[source] = int(m["by_source"].get(source, 0))
        rows.append(row)
        if options.get("export"):
            target = r.store.path("exports", "monot5", p["corpus"], p["leakage"], f"{p['size']}.tsv")
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.tmp")
            export_monot5(pd.read_parquet(path / "instances.parquet"), tmp)
            tmp.replace(target)
    print(markdown_table(pd.DataFrame(rows), floatfmt="{:.4f}"))
    if options.get("export"):
        print(f"monoT5 text exports: {r.store.path('exports', 'monot5')}")


def report_cells(r, asks: list[Ask], cells, options) -> None:
    """Each cell's artifact (train, rerank) or, for evaluate, its mean measures (and the memorization of the leaked
    cells it completes)."""
    for cell in cells:
        mine = [a for a in asks if a == cell.ask(a.stage)]
        if not mine:
            continue
        if mine[0].stage == "evaluate":
            out = "  ".join(f"{m}={v:.4f}" for m, v in sorted(run_cell(r, cell).items()))
        else:
            out = str(r.path(mine[0]))
        print(f"{cell}: {out}  ({time.time() - options['started']:.1f}s)")  # the command computes one cell a run


def report_memorization(r, asks: list[Ask], cells, options) -> None:
    """Tables 6-8 from the stored memorization artifacts."""
    s = r.settings
    for path in memorization_tables.write_memorization_tables(s, r, tables_out(s, s.overrides), cells,
                                                              memorization_tables.stored_cv_sizes(s, r, cells)):
        print(path)


def report_robustness(r, asks: list[Ask], cells, options) -> None:
    """The robustness tables and figure from the stored artifacts."""
    s = r.settings
    for path in robustness_tables.write_robustness_tables(s, r, tables_out(s, s.overrides), robustness_cells(s)):
        print(path)


def cmd_grid(overrides: list[str], *, demo: bool = False) -> int:
    start = time.time()
    s = compose((["experiment=demo"] if demo else []) + overrides)
    refuse_missing(s, [])  # every input the grid lacks, in one report, before any work
    r = runner(s)
    r.store.require_writable("leakexp demo" if demo else "leakexp grid")
    s = r.settings
    if s.robustness.enabled:
        robustness_settings(s)  # bad settings fail before any work
    cells = grid_cells(s)
    # the cells, the robustness cells and the demo's audits in one pool of workers (cells in processes at once,
    # each computing what the store lacks, shared work once)
    jobs = grid_jobs(s, r, cells, demo_asks(s, r) if demo else [])
    workers = cell_workers(s, len(jobs))
    if workers > 1:
        failed_jobs = each(jobs, functools.partial(run_job_in_worker, s), desc="grid", unit="job", workers=workers)
    else:
        failed_jobs = each(jobs, lambda job: run_job(r, job), desc="grid", unit="job")
    failed = [(job.what, exc) for job, exc in failed_jobs if job.kind in ("cell", "robustness")]
    extra_lines = []
    if demo:
        from leakexp.tables.paper import write_table1, write_table2

        write_table1(s, r)
        write_table2(s, r)
        extra_lines = demo_extras(r)
    out = write_tables(s, r, out=tables_out(s, (["experiment=demo"] if demo else []) + overrides))
    for line in extra_lines:
        print(line)
    print(f"{len(cells) - len(failed)}/{len(cells)} cells done in {time.time() - start:.1f}s")
    for cell, exc in failed:
        print(f"FAILED {cell}: {type(exc).__name__}: {exc}", file=sys.stderr)
    print(f"tables: {out}")
    return 1 if failed else 0


def cmd_tables(overrides: list[str], out: str | None = None) -> int:
    """The tables from the store alone; those of table-only settings in a folder named by them, or ``out``."""
    s = compose(overrides)
    if out is None:
        Store(s.run.store, create=False).require_writable("leakexp tables")
    print(f"tables: {write_tables(s, out=tables_out(s, overrides, out))}")
    return 0


def cmd_corpus_stats(overrides: list[str]) -> int:
    """``name: value`` lines per test corpus and for the training pool; exit 2 (the errors on stderr) when a corpus
    fails its check (duplicate ids, an implausibly short median document)."""
    s = compose(overrides)  # the runner (and its checks of Java, variants, ...) only for a world a stage makes
    made = pool_source(s.data).made_by
    corpora = {n: s.corpus_of(n).model_dump() for n in s.corpus_names}
    world = runner(s, needs=()).get(Ask.of(made)) if made else None
    lines, errors = corpus_figures(corpora, s.data.model_dump(), world)
    for name, value in lines:
        print(f"{name}: {value:g}" if isinstance(value, float) else f"{name}: {value}")
    for e in errors:
        print(f"leakexp: {e}", file=sys.stderr)
    return 2 if errors else 0


def cmd_status(overrides: list[str], verify: bool = False, why: list[str] | None = None) -> int:
    if why:  # `--why build train corpus=...`: the overrides after the stage names are overrides all the same
        overrides = [*overrides, *(w for w in why if "=" in w)]
        why = [w for w in why if "=" not in w]
    s = compose(preflight.composable(overrides))  # seed=1,2: those cells' rows (preflight.chosen_cells)
    if why:
        print("\n".join(lineage(s, why)))
        return 0
    status = grid_status(s, verify=verify, cells=preflight.chosen_cells(s, overrides))  # seed=2: that cell's rows
    print(render_status(status))
    for line in scheduler_notes(s):  # cells a launcher submitted: queued, running, failed (with job ids)
        print(line)
    _print_unmet(s, overrides)
    return 0 if complete(status) else 1


def cmd_stages(overrides: list[str], graph: str | None = None) -> int:
    """The registry's stages as the configuration uses them (read-only); ``graph``: also their graph, drawn."""
    s = compose(overrides)
    infos = overview.listing(s)
    print(overview.render_stages(infos))
    if graph:
        print(f"graph: {overview.draw(infos, Path(graph))}")
    return 0


def cmd_diff(store_a: str, store_b: str) -> int:
    """Where two stores part (leakexp.runner.diff), in the registry's stage order; exit 1 when an artifact of equal
    key differs, as diff(1) does."""
    from leakexp.runner import diff
    from leakexp.runner.stage import stages

    found = diff.diff_stores(Path(store_a), Path(store_b), order=[s.key_name for s in stages()])
    print("\n".join(diff.render(found)))
    return 1 if found.differ else 0


def _print_unmet(s, overrides: list[str] = ()) -> None:
    """What a run will still need, as one block (read-only commands list it; only commands that compute refuse)."""
    found = preflight.missing(s, preflight.chosen_cells(s, overrides))
    if found:
        print(preflight.report_text(found, overrides, heading="a run will still need"))


def cmd_check(overrides: list[str]) -> int:
    """Every input the grid (or the cells the overrides name) still lacks, in one report; exit 1 when any."""
    s = compose(preflight.composable(overrides))
    found, report = preflight.check(s, overrides)
    print(report)
    return 1 if found else 0


def refuse_missing(s, overrides: list[str], cells=None) -> None:
    """A command that computes stops before any work with the one report of every missing input."""
    found, report = preflight.check(s, overrides, cells)
    if found:
        raise MissingInputs(report)


def cmd_compare_runs(overrides: list[str], *, corpus: str | None, runs: list[str], depth: int) -> int:
    """How far two first-stage runs agree: leakexp's first stage of ``corpus`` (under the overrides) or a first
    run file, against a second run file; per-topic figures to CSV, means printed."""
    if depth < 1:
        raise ConfigError(f"--depth {depth}: compare at least the top 1")
    if len(runs) + (corpus is not None) != 2:
        raise ConfigError("compare-runs compares two runs: give --corpus NAME --run RUN, or --run A --run B")
    paths = [run_path(r) for r in runs]
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(f"--run {p}: no such run file")
    frames = [read_run(p, depth=depth) for p in paths]
    names = [str(p.name) for p in paths]
    out_dir = Path(".")
    if corpus is not None:
        s = compose(overrides)
        r = runner(s, needs=())  # a first stage needs no model and no annotation
        frames.insert(0, r.get(Ask.of("firststage", corpus=corpus)))
        names.insert(0, f"leakexp's first stage of {corpus} (bm25.backend={r.settings.bm25.backend})")
        out_dir = r.store.path("compare-runs")
    table = run_overlap(frames[0], frames[1], depth)
    out_dir.mkdir(parents=True, exist_ok=True)

    path = atomic_write_text(out_dir / "overlap.csv", table.to_csv(index=False))
    print(f"A: {names[0]}\nB: {names[1]}")
    print(f"{len(table)} topics; top-{depth} documents shared: {table.shared.mean():.3f}; top-10 shared: "
          f"{table.top10_shared.mean():.3f}; same document at the same rank: {table.same_rank.mean():.3f}; "
          f"topics only in A: {int((table.b == 0).sum())}, only in B: {int((table.a == 0).sum())}")
    print(f"per topic: {path}")
    return 0


def cmd_fetch(overrides: list[str], *, only: list[str] | None = None, listing: bool = False) -> int:
    """Download what the configuration's runs read and is public; list what cannot be fetched (leakexp.grid.fetch)."""
    from leakexp.grid.fetch import fetch

    return fetch(compose(overrides), only=only, listing=listing)


def cmd_plan(overrides: list[str], *, jobs: str | None = None) -> int:
    """Job counts and hours of the configured grid; it reads no input file and writes nothing but ``jobs``, the cells
    one per line, where asked (it may be made before the data is in place, on any machine)."""
    import pandas as pd

    s = compose(overrides)
    r = runner(s, readonly=True, files=False)
    print(render_plan(plan(s, r)))
    if r.settings.bm25.backend == "anserini":
        print("  first stage: Anserini 0.22.1 (bm25.backend=anserini) needs Java 11 or 17 "
              "(Debian 12: apt-get install openjdk-17-jre-headless) and its jar, installed by `make setup`")
    cells = pd.DataFrame([vars(c) for c in grid_cells(r.settings)])
    if jobs:
        atomic_write_text(Path(jobs), cells.to_csv(sep="\t", index=False))
        print(f"  job list ({len(cells)} cells, one per line): {jobs}")
    else:
        print(f"  job list: {len(cells)} cells (--jobs FILE writes them, one per line)")
    _print_unmet(s, overrides)
    return 0


def _corpus_topics(specs: list[str]) -> dict[str, list[str]]:
    out = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"leakexp: --corpus expects NAME=TOPICS (a TREC topic file or a list of ids), got {spec!r}")
        out[name] = read_topic_ids(Path(path))
    return out


def cmd_annotations(args) -> int:

    if args.action == "table2":
        ann = annotations.read_annotations([Path(f) for f in args.annotations])
        a, b = annotations.table2(ann, _corpus_topics(args.corpus))
        out = Path(args.out)
        write_table(a, out, "table2a", "Table 2 (a). Manually annotated leakage candidates: true and false "
                    "candidates as queries and topics per corpus.")
        write_table(b, out, "table2b", "Table 2 (b). Annotated query reformulation types (queries).")
        print(markdown_table(a))
        print(markdown_table(b))
        print(f"table 2: {out}")
        return 0
    if args.action == "kappa":
        k = annotations.kappa(annotations.read_annotations([Path(args.first)]), annotations.read_annotations([Path(args.second)]))
        print(f"candidates: {k['candidates']}")
        print(f"kappa_leak: {k['kappa_leak']:.4f}")
        print(f"kappa_type: {k['kappa_type']:.4f}")
        print(f"kappa_labels: {k['kappa_labels']:.4f}")
        return 0
    if args.action == "import":
        ann = annotations.read_annotations([Path(f) for f in args.annotations])
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, ids in _corpus_topics(args.corpus).items():
            leaks = annotations.verified_leaks(ann, ids)
            atomic_write_text(out / f"verified-{name}.csv",
                              leaks[["train_qid", "query", "topic_qid", "type", "similarity"]].to_csv(index=False))
            print(f"{name}: {len(leaks)} verified leaking queries for {leaks.topic_qid.nunique()} topics")
        print(f"verified leaks: {out}")
        return 0
    if args.action == "calibrate":
        ann = annotations.read_annotations([Path(f) for f in args.judged])
        threshold, curve = annotations.calibrate(ann, args.target)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "calibration.csv", curve.to_csv(index=False))
        plot_calibration(curve, threshold, args.target, out / "calibration.png")
        print(f"{len(ann)} judged pairs; lowest threshold with precision >= {args.target}: "
              f"{'none' if threshold is None else f'{threshold:.4f}'}")
        print(f"curve: {out}/calibration.csv, {out}/calibration.png")
        return 0 if threshold is not None else 1
    # sample / review need the pipeline's candidates


    s, r = _runner(args.overrides, needs=("embed", "detect"))  # candidates to annotate: no annotation needed yet
    s = r.settings
    collections = [r.get(Ask.of("collection", corpus=c)) for c in s.data.corpora]
    if args.action == "sample":
        pairs = d.leak_pairs(r.get(Ask.of("detect")), args.lower)
        chosen = annotations.stratified_sample(pairs, n=args.n, lower=args.lower, seed=args.seed)
    else:
        pairs = d.leak_pairs(r.get(Ask.of("detect")), s.detect.threshold)
        chosen = annotations.review_candidates(pairs, s.verify.review_top_k)
    labels = None
    if args.label_with_truth:
        source = pool_source(s.data)
        if not source.made_by:
            raise SystemExit("leakexp: --label-with-truth needs the toy world (data=toy)")
        truth = source.planted_leaks(r.ensure(Ask.of(source.made_by)))
        labels = annotations.truth_labels(chosen, truth)
    records = annotations.to_annotation_records(chosen, collections, labels)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(args.out), "".join(__import__("json").dumps(r) + "\n" for r in records))
    print(f"{len(records)} candidates for annotation: {args.out}")
    return 0


def split_overrides(items: list[str], what: str) -> tuple[list[str], list[str]]:
    """(Hydra overrides, other arguments) of a command whose positional arguments are ``what`` (e.g. edge files
    as SPLIT=PATH): ``key=value`` with a config key is an override. A whole section (``train=PATH``: ``train`` holds
    the training budget) takes no file path, so there an existing file is ``what``; a group or a leaf whose value is
    also an existing file could be either and is an error saying so."""
    keys, sections, overrides, rest = top_level_keys(), section_keys(), [], []
    for item in items:
        key, eq, value = item.partition("=")
        if eq and key in sections and Path(value).is_file():
            rest.append(item)
        elif eq and key.lstrip("+~").split(".")[0] in keys:
            if Path(value).exists():
                raise ConfigError(f"{item!r} could be the setting {key}={value} or {what} named {key!r}; leakexp "
                                  f"takes it for neither: name that {what.split()[-1]} otherwise")
            overrides.append(item)
        else:
            rest.append(item)
    return overrides, rest


def cmd_graph_audit(args) -> int:
    overrides, args.edges = split_overrides(list(args.edges), "an edge file of a split")
    if args.wordnet == "":  # --wordnet without DIR: LEAKEXP_WORDNET, read now (not when leakexp was imported)
        from leakexp.toolkit.graph_data import default_wordnet

        args.wordnet = str(default_wordnet())
    store = str(compose(overrides).run.store) if overrides else None
    return audit_command(store=store, edges=args.edges, wordnet=args.wordnet, pos=args.pos, split_by=args.split_by,
                         resplit=args.resplit, proportions=args.proportions, seed=args.seed,
                         train_split=args.train_split, antonym_labels=args.antonym_label,
                         synonym_labels=args.synonym_label,
                         columns=args.columns, out=args.out)
def _pair_kwargs(args) -> dict:
    """The shared inputs of audit/decontaminate/resample. Model, threshold and k: the options, else detect.* when
    the command line sets it (detect.*=... or experiment=...), else the source documents' values
    (audit.PAPER_DEFAULTS): the default experiment is the demo, whose values fit only the toy world."""
    overrides = list(args.overrides)
    for side in ("train", "test"):  # an override typed after --train/--test lands in its list
        specs = []
        for v in getattr(args, side):
            key = v.partition("=")[0]
            (overrides if "=" in v and ("." in key or key in _OVERRIDE_KEYS) else specs).append(v)
        setattr(args, side, specs)
    s = compose(overrides)
    d = s.detect
    given = {o.partition("=")[0].lstrip("+~") for o in overrides}

    def default(key: str):
        return getattr(d, key) if "experiment" in given or f"detect.{key}" in given else PAPER_DEFAULTS[key]

    k = getattr(args, "k", None)
    k = int(default("k")) if k is None else k
    threshold = getattr(args, "threshold", None)
    threshold = float(default("threshold")) if threshold is None else threshold
    if k < 1:
        raise ValueError(f"--k {k}: give a number of neighbours >= 1 (the study: 100)")
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"--threshold {threshold:g}: a cosine similarity lies in [-1, 1] (the study: 0.91)")
    args.seed_defaults = [name for name, given_value in (("sbert", args.model), ("k", getattr(args, "k", None)),
                                                         ("threshold", getattr(args, "threshold", None)))
                          if given_value is None and default(name) == PAPER_DEFAULTS[name]
                          and not ("experiment" in given or f"detect.{name}" in given)]
    options = AuditOptions(k=k, threshold=threshold, ngrams=tuple(getattr(args, "ngrams", (13, 3))),
                           train_rel=getattr(args, "train_rel", 1), test_rel=getattr(args, "test_rel", 1))
    sbert = args.model or str(default("sbert"))
    if args.train and args.test:  # before any input is read (fetched where allowed); a qrels-only audit embeds nothing
        from leakexp.lib.hub import require_sbert
        from leakexp.runner.stage import fetching

        with fetching():
            if args.model:
                require_sbert(sbert, "--model")
            elif "experiment" in given or "detect.sbert" in given:
                require_sbert(sbert, "detect.sbert")
            else:
                require_sbert(sbert, "--model", default="not given: the default, Fröbe et al. 2022's model")
    return dict(train=args.train, test=args.test, train_qrels=args.train_qrels, test_qrels=args.test_qrels,
                fields=args.fields, test_variants=args.test_variants, out=Path(args.out), store=Path(s.run.store),
                sbert=sbert, batch_size=d.batch_size, options=options)


def _defaults_line(args, kwargs) -> str | None:
    """Which settings came from the source documents, so that a printed figure says what it was measured with."""
    if not getattr(args, "seed_defaults", None):
        return None
    o = kwargs["options"]
    value = {"sbert": kwargs["sbert"], "k": o.k, "threshold": o.threshold}
    shown = ", ".join(f"{name} {value[name]}" for name in args.seed_defaults)
    return f"defaults: {shown} ({PAPER_DEFAULTS_SOURCE}; the demo's with experiment=demo)"


def check_pair_args(args) -> None:
    """The numeric options of audit / decontaminate / resample, before any input is read."""
    import math


    def bad(option: str, value, must: str) -> None:
        raise ConfigError(f"{option} {value}: {must}")

    for option, value in (("--threshold", getattr(args, "threshold", None)),
                          ("--extrapolation-threshold", getattr(args, "extrapolation_threshold", None))):
        if value is not None and not (math.isfinite(value) and -1.0 <= value <= 1.0):
            bad(option, value, "a cosine similarity lies in [-1, 1] (the study: 0.91)")
    if getattr(args, "k", None) is not None and args.k < 1:
        bad("--k", args.k, "give a number of neighbours >= 1 (the study: 100)")
    if getattr(args, "buckets", None) is not None and args.buckets < 2:
        bad("--buckets", args.buckets, "ReSTTest needs K >= 2 buckets (extrapolate-eval: 5)")
    if getattr(args, "sample", None) is not None and args.sample < 1:
        bad("--sample", args.sample, "the k-means training sample needs >= 1 query")
    for size in getattr(args, "sizes", None) or []:
        if size < 1:
            bad("--sizes", size, "training-set sizes are >= 1")
    for n in getattr(args, "ngrams", None) or []:
        if n < 1:
            bad("--ngrams", n, "n-gram sizes are >= 1 (lm-eval: 13)")


def cmd_pair(args) -> int:
    check_pair_args(args)
    try:
        if args.command == "split-eval":
            e = compose([]).evaluate
            table = split_eval.run_split_eval(args.runs, qrels=Path(args.qrels), audit_dir=Path(args.audit),
                                         measures=args.measures or list(e.measures), baseline=args.baseline,
                                         leaked_by=args.leaked_by, source=args.source,
                                         out=Path(args.out) if args.out else None, mfr_missing=str(e.mfr_missing),
                                         mfr=str(e.mfr))
            print(f"baseline: {table.attrs['baseline']}")
            print(markdown_table(table, floatfmt="{:.4f}"))
            groups = table.groupby("group").queries.max()
            print(f"{int(groups.get('leaked', 0))} leaked ({args.leaked_by}) and {int(groups.get('other', 0))} other "
                  "test queries with judgments; p: paired t-test, empty with fewer than two queries")
            print(f"split-eval: {Path(args.out) if args.out else Path(args.audit) / 'split-eval'}/split_eval.{{md,csv,tex}}")
            return 0
        kwargs = _pair_kwargs(args)
        line = _defaults_line(args, kwargs)
        if line and not (args.command == "audit" and not args.train):  # a qrels-only audit embeds nothing
            print(line)
        if args.command == "audit":
            print(audit.format_summary(audit.run_audit(**kwargs)))
            print(f"report: {kwargs['out'] / 'report.md'}")
        elif args.command == "decontaminate":
            f = resample.run_decontaminate(**kwargs, by_label=args.by_label, docs=args.docs)
            print(f"removed: {f['removed']} of {f['train_queries']} training queries "
                  f"({f['removed_similarity']} above {f['threshold']:g}, {f['removed_exact_only']} exact duplicates "
                  f"below it, {f['removed_label_only']} by label only)")
            print(resample.matches_line(f))
            print(f"decontaminated data: {kwargs['out']} (removed.csv lists each removal)")
        else:
            extra = (dict(sizes=args.sizes, extrapolation_threshold=args.extrapolation_threshold, unit=args.size_unit)
                     if args.method == "restrain" else dict(buckets=args.buckets, sample=args.sample))
            table = resample.run_resample(args.method, **kwargs, seed=args.seed, **extra)
            print(markdown_table(table, floatfmt="{:.4f}"))
            print(f"{args.method}: {kwargs['out'] / args.method}")
        return 0
    except split_eval.NothingToCompare as exc:
        print(f"leakexp: {exc}", file=sys.stderr)
        return 1
    except (ValueError, DataUnavailable) as exc:
        print(f"leakexp: {exc}", file=sys.stderr)
        return 2


def demo_extras(runner) -> list[str]:
    """Run every demo extra; returns the lines to print."""
    lines = []
    path = runner.ensure(Ask.of("pair-audit"))
    figures = runner.store.marker(path).figures
    lines += [f"train/test audit of the toy world (leakexp audit, decontaminate, resample): {path}",
              *audit.format_summary(figures["audit"]).splitlines(),
              *(f"  {k}: {path / v}" for k, v in figures["outputs"].items())]
    path = runner.ensure(Ask.of("graph-audit"))
    figures = runner.store.marker(path).figures
    lines += [f"graph audit (synthetic benchmark, edge split vs vertex split): {path}",
              *graph.summary_lines(figures["audit"]), *graph.summary_lines(figures["resplit"])]
    return lines


# what a stage's command prints after computing its artifacts, by the command's name (others: report_folders)
REPORTS = {"index": report_indexes, "detect": report_candidates, "verify": report_leaks, "build": report_sets,
           "train": report_cells, "rerank": report_cells, "evaluate": report_cells,
           "memorization": report_memorization, "robustness": report_robustness}
# a stage whose command does another thing than computing its artifacts: corpus-stats reads the collections
# themselves, so a corpus its check refuses still shows its figures
INSTEAD = {"corpus-stats": cmd_corpus_stats}
# what a stage's command sets: `leakexp robustness` computes the robustness parts whatever robustness.enabled says
# (which decides whether the grid computes them); no stage reads it, so no key changes
SETS = {"robustness": ("robustness.enabled=true",)}
