"""The ``verify`` and ``leaks`` stages: the leakage candidates reviewed by annotators (or, in the toy world, by the
generator's ground truth) in the study's annotation format (``leakexp.toolkit.annotations``), and the verified leaks
per corpus."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Literal, TYPE_CHECKING

from pydantic import Field

from leakexp.data.files import files_identity
from leakexp.data.sources import source_of
from leakexp.runner.config import FetchSettings, fetched_annotations
from leakexp.runner.schema import Name, PositiveInt, Section, Settings
from leakexp.runner.stage import Ask, Config, ConfigError, Context, Stage, register_stage
from leakexp.runner.store import atomic_write_json, read_json
from leakexp.lib.decisions import ROUNDING, SIMILARITY_STEP, above
from leakexp.lib.candidates import leak_pairs, near_threshold
from leakexp.lib.training_sets import leaking_queries
from leakexp.toolkit.annotations import (FINAL_FILES, FINAL_NAMES, SPIRE22_ANNOTATIONS, read_annotations, review_candidates,
                                         to_annotation_records, truth_labels, verified_leaks, write_annotations)

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)


# -- stages ----------------------------------------------------------------------------------------------
def missing_annotations(why: str) -> ConfigError:
    """The one-line error of real data without annotation files: which setting, which files, where they are."""
    return ConfigError(
        f"{why}: the real data's candidates are verified by the study's manual annotations; give the four final "
        f"files of {SPIRE22_ANNOTATIONS} as verify.annotations=[DIR/{',DIR/'.join(FINAL_NAMES)}] (DIR: where you "
        f"saved them; `leakexp fetch` with this run's overrides downloads them into fetch.dir, where a null "
        f"verify.annotations finds them), or your own annotations of `leakexp annotations review`")


def annotation_files(spec, data_kind: str) -> list[Path]:
    """The annotation files ``verify.annotations`` names ([] for the toy world's ground truth, ``truth``)."""
    if spec == "truth":
        if not source_of(data_kind).made_by:  # a generated world knows its planted leaks
            raise missing_annotations(f"verify.annotations=truth (the toy world's ground truth) needs data.kind=toy, "
                                      f"not {data_kind}")
        return []
    if spec is None or spec == "???":
        raise missing_annotations("verify.annotations is not set")
    files = [Path(p) for p in (spec if isinstance(spec, list) else [spec])]
    for f in files:
        if not f.is_file():
            raise FileNotFoundError(f"verify.annotations names {f}, which does not exist; give the study's "
                                    f"annotation JSONL files ({FINAL_FILES})")
    return files


def fill_annotations(values: dict) -> None:
    """A null ``verify.annotations`` of real data reads the study's files where ``leakexp fetch`` put them, once all
    are there: every command then names the same files, so status and tables see the grid's keys."""
    verify = values.get("verify") or {}
    if verify.get("annotations") is not None or source_of(values["data"]["kind"]).made_by:
        return
    files = fetched_annotations(FetchSettings.model_validate(values["fetch"]))
    if files and all(f.is_file() for f in files):
        verify["annotations"] = [str(f) for f in files]


def require_annotations(s: Settings) -> None:
    """Real data needs annotation files (``verify.annotations``), before any work of a command that verifies."""
    annotation_files(s.verify.annotations, s.data.kind)


def open_annotations(path: Path) -> pd.DataFrame:
    """The verify artifact's annotations (labels back as lists)."""
    import pandas as pd

    ann = pd.read_parquet(Path(path) / "annotations.parquet")
    ann["labels"] = ann.labels.str.split("|")
    return ann


@register_stage
class Verify(Stage):
    """the verified candidates (annotations, or the toy world's ground truth)"""

    # 2: candidates reviewed in an order float noise cannot change (rounded similarity, ids), annotation files named
    # without their folder, the candidates near the threshold recorded
    name, version = "verify", 2
    help = "review the top candidates per topic and import annotations; prints verified leaks per corpus"
    reads = ("detect.threshold", "verify.annotations", "verify.review_top_k", "data.corpora", "data.kind", "data.seed")
    require = staticmethod(require_annotations)
    fills = staticmethod(fill_annotations)
    opener = staticmethod(open_annotations)

    @staticmethod
    def files(c: Config) -> list[Path]:
        return annotation_files(c.settings("verify").annotations, c.settings("data").kind)

    def inputs(self, p: dict, c: Config) -> dict:
        inputs = {"candidates": Ask.of("detect"),
                  "collections": [Ask.of("collection", corpus=n) for n in c.settings("data").corpora or []]}
        if not self.files(c):  # the ground truth of the world a stage made (the toy world)
            made = source_of(c.settings("data").kind).made_by
            inputs[made] = Ask.of(made)
        return inputs

    def external(self, p: dict, c: Config):
        files = self.files(c)
        return files_identity(*files) if files else None

    def path(self, p: dict, c: Config) -> list:
        return []

    def compute(self, ctx: Context, tmp: Path) -> dict:
        files = self.files(ctx.config)
        threshold, top_k = ctx.settings("detect").threshold, ctx.settings("verify").review_top_k
        pairs = leak_pairs(ctx.inputs["candidates"], threshold)
        near = near_threshold(ctx.inputs["candidates"], threshold)
        near.assign(above=above(near.similarity, threshold)).to_parquet(tmp / "near_threshold.parquet", index=False)
        if len(near):
            log.warning("%d candidate(s) lie within %g of detect.threshold=%g (listed in near_threshold.parquet): "
                        "another CPU's float noise could decide them otherwise; %s", len(near), SIMILARITY_STEP,
                        threshold, ROUNDING)
        collections = ctx.inputs["collections"]
        review = review_candidates(pairs, top_k)
        if not files:
            source = source_of(ctx.settings("data").kind)
            truth = source.planted_leaks(ctx.inputs[source.made_by])
            write_annotations(tmp / "annotations.jsonl", to_annotation_records(review, collections,
                                                                              truth_labels(review, truth)))
            ann = read_annotations([tmp / "annotations.jsonl"], allow_empty=True)
        else:
            write_annotations(tmp / "review.jsonl", to_annotation_records(review, collections))
            ann = read_annotations(files)
        ann.assign(labels=ann.labels.map(lambda x: "|".join(x))).to_parquet(tmp / "annotations.parquet", index=False)
        leaking = {c.name: sorted(verified_leaks(ann, list(c.topics), corpus=c.name, pairs=pairs).topic_qid.unique())
                   for c in collections}
        atomic_write_json(tmp / "leaking_topics.json", leaking)
        return {"reviewed": len(review), "annotated": len(ann), "true": int(ann.leak.sum()), "near_threshold": len(near)}

    def asks(self, r, cells) -> list[Ask]:
        return [Ask.of("verify")]

    class Settings(Section):
        """``verify``: the annotation files (or the toy world's ground truth) and how many candidates are reviewed."""

        annotations: Literal["truth", "???"] | Annotated[list[Name], Field(min_length=1)] | Name | None
        review_top_k: PositiveInt

        def files(self):
            if self.annotations in ("truth", "???", None):
                return []
            files = self.annotations if isinstance(self.annotations, list) else [self.annotations]
            return [("verify.annotations", Path(f)) for f in files]


@register_stage
class Leaks(Stage):
    """the verified leaks of one corpus (training query and topic)"""

    # 2: one row per verified leak (a query verified for two topics leaks for each), no longer per query
    name, version = "leaks", 2
    reads = ("detect.threshold",)

    def inputs(self, p: dict, c: Config) -> dict:
        return {"pool": Ask.of("pool"), "candidates": Ask.of("detect"), "annotations": Ask.of("verify"),
                "collection": Ask.of("collection", corpus=p["corpus"])}

    def value(self, ctx: Context) -> pd.DataFrame:
        pairs = leak_pairs(ctx.inputs["candidates"], ctx.settings("detect").threshold)
        collection = ctx.inputs["collection"]
        leaks = verified_leaks(ctx.inputs["annotations"], list(collection.topics), corpus=collection.name, pairs=pairs)
        return leaking_queries(ctx.inputs["pool"], leaks)


def stored_leaking_topics(runner) -> dict[str, list[str]]:
    """Topics with verified leaks per corpus, from the stored verify artifact (empty if it is not in the store),
    what the tables split Tables 3-5, Figure 2 and the robustness tables by. Computes nothing."""
    state, path, _ = runner.state(Ask.of("verify"))
    return read_json(path / "leaking_topics.json") if state == "done" else {}
