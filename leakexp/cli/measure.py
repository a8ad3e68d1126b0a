"""``leakexp measure``: runs scored as trec_eval and ir_measures score them, under the configuration's ``evaluate``
settings (``leakexp.toolkit.measure``).

It starts as trec_eval does: it reads the configuration's ``evaluate`` section alone, so it imports neither the
grid's stages nor torch (a test holds that).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from leakexp.runner.config import ConfigError, compose_raw, resolved_values, top_level_keys
from leakexp.runner.schema import validate
from leakexp.runner.store import atomic_write_text
from leakexp.stages.evaluate import Evaluate
from leakexp.toolkit import measure

# what a measure override may set: the evaluation settings, and the configuration they come from
READ = ("experiment", "evaluate")
HARMLESS = ("store", "verbose")  # accepted as every command accepts them; measure reads no store


def _is_override(word: str, keys: set[str]) -> bool:
    """``KEY=VALUE`` is an override when KEY starts with a configuration name (``evaluate.mfr``, ``experiment``),
    else a named run (``NAME=PATH``) or a file."""
    return "=" in word and not Path(word).exists() and word.partition("=")[0].lstrip("+~").split(".")[0] in keys


def split_words(words: list[str], measures: list[str] | None) -> tuple[list[str], list[str], list[str] | None]:
    """(runs, overrides, measures) of the command's words: ``-m`` takes every word up to the next option, so runs
    and overrides written after the measures are taken back from them."""
    keys = set(top_level_keys())
    words, named = list(words), None
    if measures is not None:
        named = [w for w in measures if not (_is_override(w, keys) or Path(w).is_file() or w.startswith("bundled:"))]
        words += [w for w in measures if w not in named]
    overrides = [w for w in words if _is_override(w, keys)]
    for w in words:
        head = w.partition("=")[0].lstrip("+~").split(".")[0]
        if w not in overrides and "." in w.partition("=")[0] and not Path(w).exists() and \
                (close := difflib.get_close_matches(head, keys, n=1, cutoff=0.75)):
            raise ConfigError(f"{w}: {head} is no setting and no run file; did you mean "
                              f"{close[0]}{w.partition('=')[0].lstrip('+~')[len(head):]}={w.partition('=')[2]}?")
    return [w for w in words if w not in overrides], overrides, named


def check_overrides(overrides: list[str]) -> None:
    """Refuse an override that measure does not read (it would change nothing), naming what does."""
    for o in overrides:
        key = o.partition("=")[0].lstrip("+~")
        if key == "rerank.depth":
            raise ConfigError(f"{o}: measure scores the whole run; cut it with --depth {o.partition('=')[2]}")
        if key.split(".")[0] not in READ + HARMLESS:
            raise ConfigError(f"{o}: measure reads only evaluate.* (and experiment=); this override changes nothing")


def evaluation_settings(overrides: list[str]) -> Evaluate.Settings:
    """The ``evaluate`` section of the configuration ``overrides`` compose, checked against its schema (a bad value
    is a ConfigError naming the setting)."""
    return validate("evaluate", Evaluate.Settings, resolved_values(compose_raw(overrides))["evaluate"])


def cmd_measure(args) -> int:
    """``leakexp measure``: runs scored under the configuration's evaluation settings, compared when several."""
    runs, overrides, measures = split_words(args.runs, args.measures)
    if not runs:
        raise ConfigError("measure: give at least one run file besides the overrides")
    check_overrides(overrides)
    settings = measure.MeasureSettings.of(evaluation_settings(overrides), measures=measures, depth=args.depth,
                                          complete=args.complete)
    if args.out and Path(args.out).is_dir():
        raise IsADirectoryError(f"--out {args.out} is a folder; give the CSV file to write")
    scored, empty = measure.measure_runs(runs, args.qrels, settings)
    if args.baseline is not None:
        measure.baseline_of([s.name for s in scored], args.baseline)  # a wrong name before any output
    if args.out:
        atomic_write_text(Path(args.out), measure.per_topic_frame(scored).to_csv(index=False))
    print("\n".join(measure.report(scored, settings, empty, per_topic=args.per_topic, baseline=args.baseline)))
    if args.out:
        print(f"per topic: {args.out}")
    return 0
