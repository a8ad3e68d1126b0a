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
import logging
import os
import signal
import sys
import traceback

# the commands that are no stage's (a stage's command is declared by its class: ``Stage.help``, :func:`stage_commands`)
OTHER_COMMANDS = {
    "cell": "run one cell end to end (same as evaluate)",
    "grid": "run every cell of the configured grid, then write the tables",
    "demo": "the whole pipeline on the embedded toy world (experiment=demo), then the tables",
    "tables": "write the tables from the store alone (no training)",
    "status": "done / running / failed / missing artifacts of the configured grid per stage (exit 1 while incomplete)",
    "check": "every input the configured grid (or the cell the overrides name) still lacks, with where it comes "
             "from and where it goes (exit 1 while any is missing)",
    "plan": "job counts, training instances, embedding size and estimated GPU-hours of the configured grid",
    "stages": "every stage with its version, module, the settings and stages it reads under the configuration "
              "(computes nothing); --graph PATH.png|.svg also draws the stage graph",
    "compare-runs": "top-k overlap of the configured first stage of --corpus (or of a first --run) with a --run "
                    "(e.g. the SPIRE-22 authors' Anserini runs: bundled:core17.bm25-anserini.top100.run.gz)",
}
# `leakexp --help` lists each command once, in three groups (a test checks that every command is in one); the stages'
# commands come between fetch and the commands that run the grid, in the order data flows through the stages
PIPELINE_AFTER_STAGES = ("cell", "grid", "demo", "tables")
TOOLKIT = ("audit", "decontaminate", "resample", "split-eval", "measure", "annotations", "graph-audit")
INSPECTION = ("check", "status", "plan", "stages", "diff", "compare-runs")
def stage_commands() -> dict[str, str]:
    """Every registered stage's command (a family's, e.g. ``robustness``, once) and its one-line help, in the
    registry's order: what ``leakexp <name>`` computes is the stage's (``leakexp.cli.commands.cmd_stage``)."""
    from leakexp.runner.stage import stages

    out: dict[str, str] = {}
    for st in stages():
        if st.help and st.family not in out:
            out[st.family] = st.help
    return out


def command_groups(stage_cmds: dict[str, str]) -> dict[str, tuple[str, ...]]:
    return {
        "pipeline (fetch what is public, then the grid's stages in order; each computes what the store lacks)": (
            "fetch", *stage_cmds, *PIPELINE_AFTER_STAGES),
        "toolkit (any train/test pair, any run, any graph benchmark)": TOOLKIT,
        "inspection (what the configuration, the store and the data hold)": INSPECTION,
    }


CELL_KEYS = ("corpus", "leakage", "size", "model", "seed")
FETCH_KINDS = ("models", "glove", "annotations", "runs", "irds")  # leakexp.grid.fetch.KINDS

log = logging.getLogger("leakexp")


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("leakexp").setLevel(logging.INFO)
    for noisy in ("ir_datasets", "sentence_transformers", "transformers", "faiss", "pyterrier", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Hugging Face models come when asked: a command that needs a pinned model missing from the cache fetches it
    # before any work (leakexp.lib.hub); HF_HUB_OFFLINE=1 / TRANSFORMERS_OFFLINE=1, where the user sets them, forbid it


# -- any train/test pair: audit, decontaminate, resample, split-eval ---------------------------------------------
PAIR_COMMANDS = {
    "audit": "query (SBERT), lexical and label overlap of any train/test pair; writes a report",
    "decontaminate": "the training queries without those similar to a test query (DuReader-retrieval), as local files",
    "resample": "ReSTrain / ReSTTest qrels for interpolation vs extrapolation (extrapolate-eval)",
    "split-eval": "re-score TREC runs on an audit's leaked vs other test queries, with paired t-tests",
    "measure": "score TREC or MS MARCO runs as trec_eval / ir_measures and the paper's tables do (-m nDCG@10 P@1 RR "
               "MFR, -q per topic, paired t-tests between runs)",
}
_DEFAULTS_TEXT = ("Defaults on real data come from the source documents: paraphrase-MiniLM-L6-v2, the exact top-100 "
                  "neighbours and threshold 0.91 (Fröbe et al. 2022, Sec. 3); the demo's bundled all-MiniLM at "
                  "0.8 applies only with experiment=demo. detect.*=... overrides and --model/--k/--threshold win.")
PAIR_DESCRIPTIONS = {
    "audit": f"""How much of a test set is already in a training set. Prints, each out of the test queries:
  query_overlap       test queries whose most similar training query (SBERT cosine over every compared field,
                      exact top-k) is above the threshold
  exact_duplicates    test queries equal to a training query after NFKC, case folding and punctuation removal
  ngram13/ngram3_overlap  test queries sharing a word n-gram with a training query (13: lm-evaluation-harness's
                      rule); n-grams made of stop words only (NLTK's English stop list, 179 words) do not count
  label_overlap       judged test queries with at least one relevant document that is relevant for a training
                      query; label_overlap_reference_rule: the same by extrapolate-eval's '> 1 shared' rule
Writes report.md, summary.*, per_query.*, examples.*, similarity.png, neighbours.parquet, audit.json.
{_DEFAULTS_TEXT}""",
    "decontaminate": f"""The training queries and qrels without every training query above the threshold for some
test query and without every exact duplicate of a test query (NFKC, case, punctuation) whatever its similarity
(DuReader-retrieval, Qiu et al. 2022, Sec. 2.3); --by-label also removes those sharing a relevant document. Prints
the removed training queries by reason and the test queries matched: test queries with at least one training
query above the threshold or an exact duplicate, with how many such training queries each has (matches.csv).
{_DEFAULTS_TEXT}""",
    "restrain": f"""ReSTrain (extrapolate-eval, Zhan et al. 2022): nested interpolation training sets (the training queries
most similar to the test queries, balanced over them) and extrapolation sets (only training queries not above
the threshold for any test query) of the given sizes. --size-unit queries counts training queries; qrels counts
qrels lines, the unit of extrapolate-eval's released files (14k, 45k, 200k): a set then is the shortest prefix
of the selection order with at least that many qrels lines. {_DEFAULTS_TEXT}""",
    "resttest": """ReSTTest (extrapolate-eval, Zhan et al. 2022): seeded spherical k-means over training and test queries into
K buckets (the paper's K = 5); per bucket, training qrels of the other K-1 buckets, and the test queries split
into interpolation (other buckets) and extrapolation (this bucket). Only the embedding model applies here.""",
    "split-eval": """Re-score runs on the audit's leaked test queries and on the others (DuReader-retrieval, Qiu et al.
2022, Table 6): per run and group the number of judged queries, the mean, the difference to the baseline and a paired
t-test against it, Bonferroni-corrected over the other runs; no test (empty p) with fewer than two queries. The
baseline is the run named None where one is, else the first run given (--baseline NAME picks another); the first
line printed names it.
Runs: TREC (qid Q0 docno rank score tag) or MS MARCO (qid TAB docid TAB rank). An audit without a leaked
judged query is nothing to compare: said so, exit 1.""",
    "measure": """Score runs as trec_eval and ir_measures do, and as the grid's tables do: measures named as ir_measures
names them (-m nDCG@10 P@1 RR AP R@100 'P(rel=2)@1', and leakexp's MFR; default: evaluate.measures), each run
scored whole (--depth K: its top K), ranked by score with ties broken by ascending docno, against TREC qrels, under
the configuration's evaluate settings (overrides such as experiment=paper or evaluate.mfr=arithmetic).
Prints the settings, then per run which topics it averages and one `measure: value` line per measure; -q prints
trec_eval's per-topic lines instead (measure TAB qid TAB value, then the means as `all` rows). A judged topic
without a run line counts as 0 (MFR: a miss), as trec_eval -c counts it and the tables do; --run-topics leaves it
out, as trec_eval without -c. Two or more runs: each compared with the first (--baseline NAME: another) by a paired
t-test per measure, Bonferroni-corrected over the compared runs. A run that shares no topic with the qrels is an
error. MFR under evaluate.mfr=reciprocal_of_mrr (the default, the paper's numbers) is 1 / the mean reciprocal rank,
its tests pair reciprocal ranks; under arithmetic the mean first rank; its per-topic value is the first relevant
rank (inf: none in the run, or in the top --depth). --out writes the per-topic values as CSV (run, qid, measure,
value). Runs and qrels may be gzipped; bundled:<file> names a run shipped in leakexp/data/runs/ (or, for --qrels,
NIST's Common Core judgments in leakexp/data/trec/).""",
}


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
    sp.add_argument("--model", help="SBERT model name or path (default: paraphrase-MiniLM-L6-v2, Fröbe et al. 2022)")
    if name != "resttest":  # ReSTTest clusters: no neighbours, threshold or relevance label
        sp.add_argument("--k", type=int, help="nearest training queries per test text (default: 100, Fröbe et al. 2022)")
        sp.add_argument("--threshold", type=float, help="similarity threshold (default: 0.91, Fröbe et al. 2022)")
        sp.add_argument("--train-rel", type=int, default=1, help="training label counted as relevant (>=)")
    if name in ("audit", "decontaminate"):
        sp.add_argument("--test-rel", type=int, default=1, help="test label counted as relevant (>=)")
    sp.add_argument("--out", required=True, help="output directory")
    if name == "audit":
        sp.add_argument("--ngrams", nargs="+", type=int, default=[13, 3],
                        help="word n-gram sizes (13: lm-evaluation-harness's rule; 3 for short queries)")
    if name == "decontaminate":
        sp.add_argument("--by-label", action="store_true", help="also remove training queries sharing a relevant document")
        sp.add_argument("--docs", help="training documents, for the data.yaml written with the result")
    if name == "restrain":
        sp.add_argument("--sizes", nargs="+", type=int, default=[],
                        help="training set sizes in --size-unit (extrapolate-eval: 14000 45000 200000 qrels lines)")
        sp.add_argument("--size-unit", choices=["queries", "qrels"], default="queries",
                        help="what a size counts: training queries, or qrels lines as extrapolate-eval's files")
        sp.add_argument("--extrapolation-threshold", type=float, help="default: --threshold")
    if name == "resttest":
        sp.add_argument("--buckets", type=int, default=5, help="K, at least 2 (the paper: 5)")
        sp.add_argument("--sample", type=int, default=100_000, help="k-means training sample")
    if name in ("restrain", "resttest"):
        sp.add_argument("--seed", type=int, default=0)


def _pair_parser(sub, name: str, help_text: str, key: str):
    return sub.add_parser(name, help=help_text, description=PAIR_DESCRIPTIONS[key],
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _add_pair_commands(sub) -> None:
    for name in ("audit", "decontaminate"):
        _add_pair_arguments(_pair_parser(sub, name, PAIR_COMMANDS[name], name), name)
    rs = sub.add_parser("resample", help=PAIR_COMMANDS["resample"], description=PAIR_COMMANDS["resample"])
    rsub = rs.add_subparsers(dest="method", required=True, metavar="method")
    _add_pair_arguments(_pair_parser(rsub, "restrain", "interpolation / extrapolation training sets of given sizes",
                                     "restrain"), "restrain")
    _add_pair_arguments(_pair_parser(rsub, "resttest", "K buckets: train on K-1, test interpolation / extrapolation",
                                     "resttest"), "resttest")
    sp = _pair_parser(sub, "split-eval", PAIR_COMMANDS["split-eval"], "split-eval")
    sp.add_argument("runs", nargs="+", metavar="RUN", help="TREC or MS MARCO run files (NAME=PATH to name one)")
    sp.add_argument("--qrels", required=True, help="TREC qrels of the test queries")
    sp.add_argument("--audit", required=True, help="an audit's output directory")
    sp.add_argument("--leaked-by", default="semantic", choices=["semantic", "exact", "label", "any"])
    sp.add_argument("--source", help="the audit's test source the runs belong to (when qids repeat across sources)")
    sp.add_argument("--measures", nargs="+", help="default: evaluate.measures")
    sp.add_argument("--baseline", help="run compared with the others (default: the run named None, else the first given)")
    sp.add_argument("--out", help="output directory (default: AUDIT/split-eval)")
    sp = _pair_parser(sub, "measure", PAIR_COMMANDS["measure"], "measure")
    sp.add_argument("runs", nargs="*", metavar="RUN|OVERRIDE",
                    help="TREC or MS MARCO run files (NAME=PATH to name one), and Hydra overrides in any order, e.g. "
                         "experiment=paper evaluate.mfr=arithmetic")
    sp.add_argument("--qrels", required=True, help="TREC qrels (qid 0 docno label), gzipped or not")
    sp.add_argument("-m", "--measures", nargs="+", metavar="MEASURE",
                    help="measures as ir_measures names them, and MFR (default: evaluate.measures); run files and "
                         "overrides written after them are still runs and overrides")
    sp.add_argument("-q", "--per-topic", action="store_true",
                    help="per-topic lines as trec_eval -q prints them: measure TAB qid TAB value, then `all` rows")
    topics = sp.add_mutually_exclusive_group()
    topics.add_argument("-c", "--complete", dest="complete", action="store_true", default=True,
                        help="average over every judged topic, one without a run line counted as 0 and MFR a miss "
                             "(trec_eval -c; the default, as the tables)")
    topics.add_argument("--run-topics", dest="complete", action="store_false",
                        help="average over the judged topics the run has (trec_eval without -c)")
    sp.add_argument("--depth", type=int, metavar="K", help="score each run's top K per topic (default: the whole run)")
    sp.add_argument("--baseline", metavar="NAME", help="the run the others are tested against (default: the first)")
    sp.add_argument("--out", help="CSV file of the per-topic values")


def _graph_path(value: str) -> str:
    """``--graph``'s file, PNG or SVG by its suffix (checked before any work)."""
    if not value.lower().endswith((".png", ".svg")):
        raise argparse.ArgumentTypeError(f"{value!r}: give a file ending in .png or .svg")
    return value


def _take_trailing_overrides(parser, args, extra: list[str]) -> None:
    """Overrides on both sides of a command's options (``compare-runs store=/s --corpus core17 --run R
    experiment=paper``: argparse fills a positional list once, so the later ones were unrecognized) join the
    command's overrides (graph-audit: its edge files, which hold its overrides); anything else left over is the
    usual usage error."""
    target = ("overrides" if hasattr(args, "overrides") else "edges" if hasattr(args, "edges") else
              "runs" if getattr(args, "command", None) == "measure" else None)
    words = [w for w in extra if "=" in w and not w.startswith("-")] if target else []
    if target in ("edges", "runs"):  # files too: `graph-audit --out DIR edges.tsv`, `measure --qrels Q run.gz`
        words = [w for w in extra if not w.startswith("-")]
    rest = [w for w in extra if w not in words]
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if words:
        setattr(args, target, [*getattr(args, target), *words])


def _add_hydra_options(sp, command: str, words: list[str]) -> None:
    """Hydra's ``--cfg`` and ``--info`` on a command that takes overrides, and, for its ``--help``, the config groups
    and their options as the configuration directories hold them (``leakexp.runner.config.config_groups``)."""
    sp.add_argument("--cfg", choices=("job", "hydra", "all"), help="print the composed configuration (job: the "
                    "values the run reads; hydra: Hydra's node; all: both) as YAML and exit, computing nothing")
    sp.add_argument("--resolve", action="store_true", help="with --cfg: resolve the interpolations")
    sp.add_argument("--info", action="store_true", help="print the config search path, the defaults as composed "
                    "and every config group with its options, and exit")
    if command in words and {"-h", "--help"} & set(words):
        from leakexp.runner.config import ConfigError, config_groups, user_conf_dirs

        sp.formatter_class = argparse.RawDescriptionHelpFormatter
        lines = ["config groups (choose one option each: group=option; add your own in $LEAKEXP_CONF or "
                 "~/.config/leakexp/conf, e.g. corpus/mycorpus.yaml):"]
        try:
            lines += [f"  {group:<16} {', '.join(names)}" for group, names in config_groups().items()]
            if user_conf_dirs():
                lines.append(f"user configuration: {', '.join(str(d) for d in user_conf_dirs())}")
        except ConfigError as exc:
            lines.append(f"  (config error: {exc})")
        lines.append("any value: key=value (e.g. train.epochs=2); --cfg job shows them all")
        sp.epilog = "\n".join(lines)


def _show_config(args) -> int:
    """``--cfg`` / ``--info``: the configuration a command would run with, printed; nothing is computed."""
    from leakexp.runner.config import config_info, config_yaml

    print(config_info(args.overrides) if args.info else config_yaml(args.overrides, args.cfg, args.resolve), end="")
    return 0


def commands_epilog(sub, groups: dict[str, tuple[str, ...]]) -> str:
    """Every command of ``sub`` once, under its group of ``groups``, with its one-line help."""
    import textwrap

    helps = {a.dest: a.help for a in sub._choices_actions}  # the help= each command was added with
    lines = ["commands (`leakexp COMMAND --help` for one):"]
    for group, names in groups.items():
        lines.append(f"\n{group}:")
        for name in names:
            text = textwrap.wrap(helps.get(name) or sub.choices[name].description or "", 95)
            lines.append(f"  {name:<15}{(chr(10) + ' ' * 17).join(text)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the command line (not a call from Python): pin the CPU kernels before a math library loads
        from leakexp.runner.kernels import pin_environment

        pin_environment(sys.argv[1:])
    parser = argparse.ArgumentParser(
        prog="leakexp", usage="leakexp [-h] [-v] command [overrides and options]",
        description="Measure how train-test leakage affects neural re-rankers. Each command takes Hydra "
                    "overrides such as experiment=paper corpus=robust04 leakage=msm size=16000 model=knrm seed=3.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what each stage reads and writes")
    # the commands are listed once, grouped, in the epilog (argparse's own list would be one flat block)
    sub = parser.add_subparsers(dest="command", required=True, metavar="command", help=argparse.SUPPRESS, prog="leakexp")
    # the stages' commands, from the registered stages (measure starts as trec_eval does: without the stages)
    words = list(sys.argv[1:] if argv is None else argv)
    word = next((w for w in words if not w.startswith("-")), None)
    stage_cmds = {} if word == "measure" else stage_commands()
    for name, help_text in {**stage_cmds, **OTHER_COMMANDS}.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        sp.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. corpus=toy_core17 seed=2")
        _add_hydra_options(sp, name, words)
        if name == "build":
            sp.add_argument("--export-monot5", action="store_true",
                            help="also write each set in the monoT5 text format under <store>/exports/monot5/")
        if name == "compare-runs":
            sp.add_argument("--corpus", help="the corpus whose configured first stage is compared (needs its data)")
            sp.add_argument("--run", action="append", default=[], metavar="RUN",
                            help="a TREC run file (bundled:<file> for a run shipped with leakexp); once or twice")
            sp.add_argument("--depth", type=int, default=100, help="the top-k compared (default 100)")
        if name == "tables":
            sp.add_argument("--out", metavar="DIR", help="write the tables into DIR (default: <store>/tables/<data>/, "
                            "and for table-only settings such as evaluate.mfr=arithmetic a folder below it named by "
                            "them)")
        if name == "plan":
            sp.add_argument("--jobs", metavar="FILE", help="also write the grid's cells, one per line (TSV: corpus, "
                            "leakage, size, model, seed), into FILE; without it plan writes nothing")
        if name == "stages":
            sp.add_argument("--graph", type=_graph_path, metavar="PATH",
                            help="also draw the stage graph (an arrow from each input stage to the stage that reads "
                                 "it, layers top to bottom) into PATH, PNG or SVG by its suffix")
        if name == "status":
            sp.add_argument("--verify", action="store_true",
                            help="also re-read every finished artifact's files against their recorded checksums")
            sp.add_argument("--why", nargs="+", metavar="STAGE", help="what made the key of the cell's artifacts of "
                            "these stages (e.g. build train) and, for a stale one, which values or inputs differ")
    fetch_help = ("download what the configured grid reads and is public (the pinned Hugging Face models, GloVe 6B, "
                  "the SPIRE-22 annotations and runs, ir_datasets' public files), then list what cannot be fetched "
                  "and where to place it")
    f = sub.add_parser("fetch", help=fetch_help, description=fetch_help + ". Run it on a connected machine (a "
                       "cluster's login node) with the overrides of the runs to come; the runs then need no network. "
                       "Exit 1 when a download failed.")
    f.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. experiment=paper")
    _add_hydra_options(f, "fetch", words)
    f.add_argument("--only", nargs="+", choices=FETCH_KINDS, metavar="KIND",
                   help=f"fetch only these kinds: {', '.join(FETCH_KINDS)}")
    f.add_argument("--list", action="store_true", help="say what would be fetched and what is here; download nothing")
    diff_help = ("the artifacts two stores hold under equal keys with other content, earliest in the lineage first, "
                 "with the files that differ (exit 1 when any differs)")
    d = sub.add_parser("diff", help=diff_help, description=diff_help + ". Two stores of one configuration (two "
                       "machines, two clusters, yesterday's copy) should hold the same content under a key; the first "
                       "artifact listed with equal inputs is where they part. Reads the done markers only. Also counts "
                       "the artifacts only one store holds.")
    d.add_argument("store_a", metavar="STORE_A", help="a store directory")
    d.add_argument("store_b", metavar="STORE_B", help="another store directory")
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
    g.add_argument("--wordnet", nargs="?", const="", metavar="DIR",
                   help="build the synonym/antonym benchmark from WordNet 3.0 (default DIR: $LEAKEXP_WORDNET, else "
                        "/usr/share/wordnet)")
    g.add_argument("--pos", default="adj", choices=["adj", "noun", "verb", "adv"], help="WordNet part of speech")
    g.add_argument("--split-by", default="edges", choices=["edges", "vertices", "components"],
                   help="how a built benchmark is split (edges: the standard construction)")
    g.add_argument("--resplit", choices=["vertices", "components"], help="also write and audit a vertex-disjoint split")
    g.add_argument("--proportions", default="0.70,0.05,0.25", help="train,val,test shares (paper: 0.70,0.05,0.25)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--train-split", default="train")
    g.add_argument("--antonym-label", action="append", help="label(s) meaning antonym (default: antonym, 1)")
    g.add_argument("--synonym-label", action="append", help="label(s) meaning synonym (default: synonym, 0); "
                   "any other label in an edge file is an error")
    g.add_argument("--columns", default="head,tail,label",
                   help="order of the first three fields (WN18: head,label,tail)")
    g.add_argument("--out", help="report folder (default <LEAKEXP_STORE or store>/graph-audit/<name>/<key of inputs and "
                   "options>)")
    _add_pair_commands(sub)
    groups = command_groups(stage_cmds)
    if stage_cmds:
        parser.epilog = commands_epilog(sub, groups)
    args, extra = parser.parse_known_args(argv)
    _take_trailing_overrides(parser, args, extra)
    _setup_logging(args.verbose)
    from hydra.errors import HydraException

    from leakexp.data.files import DataFormatError, DataUnavailable
    from leakexp.runner.config import ConfigError
    from leakexp.runner.store import StoreError

    MissingInputs = ()  # raised by the commands that compute (leakexp.grid.preflight)

    if args.command == "measure":  # starts as trec_eval does: no grid, no torch (leakexp.cli.measure)
        from leakexp.cli.measure import cmd_measure as c_measure

        c, NoResults = None, ()  # no tables: nothing raises NoResults
    else:
        from leakexp.cli import commands as c
        from leakexp.grid.preflight import MissingInputs
        from leakexp.tables.paper import NoResults
    try:
        out = getattr(args, "out", None)
        if out and os.path.isfile(out) and args.command != "measure":  # an output folder cannot be an existing file
            raise FileExistsError(f"--out {out} is an existing file; give a directory (it is created if missing)")
        if getattr(args, "cfg", None) or getattr(args, "info", False):  # Hydra's --cfg / --info: nothing computed
            return _show_config(args)
        if args.command == "measure":
            return c_measure(args)
        if args.command in PAIR_COMMANDS:
            return c.cmd_pair(args)
        if args.command == "annotations":
            return c.cmd_annotations(args)
        if args.command == "graph-audit":
            return c.cmd_graph_audit(args)
        if args.command == "compare-runs":
            return c.cmd_compare_runs(args.overrides, corpus=args.corpus, runs=args.run, depth=args.depth)
        if args.command == "tables":
            return c.cmd_tables(args.overrides, out=args.out)
        if args.command == "diff":
            return c.cmd_diff(args.store_a, args.store_b)
        if args.command == "stages":
            return c.cmd_stages(args.overrides, graph=args.graph)
        if args.command == "status":
            return c.cmd_status(args.overrides, verify=args.verify, why=args.why)
        if args.command == "fetch":
            return c.cmd_fetch(args.overrides, only=args.only, listing=args.list)
        if args.command == "grid":
            return c.cmd_grid(args.overrides)
        if args.command == "demo":
            return c.cmd_grid(args.overrides, demo=True)
        if args.command == "check":
            return c.cmd_check(args.overrides)
        if args.command == "plan":
            return c.cmd_plan(args.overrides, jobs=args.jobs)
        if args.command == "cell":  # a cell end to end: its evaluation, as `leakexp evaluate`
            return c.cmd_stage("evaluate", args.overrides)
        return c.cmd_stage(args.command, args.overrides, export=getattr(args, "export_monot5", False))
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while shutting down must not change the code
        print("\nleakexp: interrupted; re-run the same command to resume (finished artifacts are kept)",
              file=sys.stderr)
        return 130
    except ConfigError as exc:
        print(f"leakexp: config error: {exc}", file=sys.stderr)
        return 2
    except HydraException as exc:  # an override Hydra cannot parse or compose
        print(f"leakexp: bad override: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except (DataFormatError, DataUnavailable, FileNotFoundError, FileExistsError, IsADirectoryError,
            NotADirectoryError, PermissionError, StoreError) as exc:
        print(f"leakexp: {exc}", file=sys.stderr)
        return 2
    except MissingInputs as exc:  # every input a computing command lacks, in one report, before any work
        print(f"leakexp: {exc}", file=sys.stderr)
        return 2
    except NoResults as exc:
        print(f"leakexp: {exc}", file=sys.stderr)
        return 1
    except Exception:  # a bug: the traceback, and what to do with it
        traceback.print_exc()
        print(f"leakexp: internal error in `leakexp {args.command}`: this is a bug. Please report it on leakexp's "
              "issue tracker with the command line and the traceback above.", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
