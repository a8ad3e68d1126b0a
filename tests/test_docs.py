"""The documentation is tested: every command of README.md, experiments/README.md and docs/*.md is run by a case
below, and every relative link between them resolves.

Commands are extracted from the fenced code blocks (```bash and plain: line continuations, comments) and from the
inline `leakexp …` / `make …` examples of those files. ``CASES`` maps each of them to how it is checked:

- ``toy``: run in-process (``leakexp.cli.main.main``) on the toy world, with a shared small store appended;
- ``paper``: experiment=paper / real data. ``plan`` and ``status`` run fully (they read nothing); a command that
  computes exits 2 with one line (no traceback) without the paper's inputs, and with stand-ins for them
  (``paper_env``, a hub cache holding the paper's models) composes and passes every check before the data;
- ``files``: a toolkit command run on small files, written under the documented names into the working directory;
- ``make``: the Makefile target's recipe (``make -n``), whose leakexp command is itself a case (run as such);
- ``system`` / ``name``: an install step or a command's bare name (its ``--help``).

A documented command without a case fails ``test_every_documented_command_has_a_case``; a case whose command is
no longer documented fails it too.
"""

from __future__ import annotations

import ast
import gzip
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import paper_env

from leakexp.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "experiments/README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")))
_FENCE = re.compile(r"^\s*```(\w*)\s*$")
_INLINE = re.compile(r"^(?:[A-Z_]+=\S+ )*(?:leakexp|leakexp-run|make)(?: |$)|^python benchmarks/")


# -- extraction ---------------------------------------------------------------------------------------------------
def _block_commands(lines: list[str]) -> list[str]:
    out, current = [], ""
    for line in lines:
        line = re.sub(r"(^|\s)#.*$", "", line).rstrip()  # a comment (no documented command quotes a '#')
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            out.append(" ".join(current.split()))
        current = ""
    return out


def commands_of(text: str) -> list[str]:
    """The command lines of one Markdown text: every line of a bash or plain code block, and every inline code
    span that is a leakexp / leakexp-run / make command or a benchmark script (spans may wrap lines)."""
    out, prose, block, lang = [], [], None, ""
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if fence and block is None:
            block, lang = [], fence.group(1)
        elif fence and block is not None:
            if lang in ("", "bash", "sh", "shell", "console"):
                out += _block_commands(block)
            block = None
            prose.append("")  # a fenced block ends a paragraph
        elif block is not None:
            block.append(line)
        else:
            prose.append(line)
    for span in re.findall(r"`([^`]+)`", "\n".join(prose)):
        command = " ".join(span.split())
        if _INLINE.match(command):
            out.append(command)
    return out


def documented_commands() -> list[str]:
    return list(dict.fromkeys(c for doc in DOCS for c in commands_of((ROOT / doc).read_text(encoding="utf-8"))))


def test_the_extractor_reads_blocks_continuations_comments_and_inline_spans():
    text = ("Run `leakexp plan\nexperiment=paper` or `leakexp/cli/main.py`.\n\n```bash\nmake demo   # the demo\n"
            "leakexp audit --train a \\\n    --test b\n# only a comment\n```\n\n```python\nprint(1)\n```\n"
            "```\nleakexp graph-audit x.tsv\n```\n")
    assert commands_of(text) == ["make demo", "leakexp audit --train a --test b", "leakexp graph-audit x.tsv",
                                 "leakexp plan experiment=paper"]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (letters, digits, spaces, - and _ kept), spaces
    as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors_of(text: str) -> set[str]:
    out, seen, block = set(), {}, False
    for line in text.splitlines():
        if _FENCE.match(line):
            block = not block
        elif not block and (m := re.match(r"^#{1,6} (.+)$", line)):
            slug = _slug(m.group(1))
            out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return out


def test_the_slug_is_githubs():
    assert _slug("Robustness (Wu et al. 2022)") == "robustness-wu-et-al-2022"
    assert _slug("Scoring any run: `leakexp measure`") == "scoring-any-run-leakexp-measure"
    assert _slug("The authors' recipes") == "the-authors-recipes"
    assert anchors_of("## A\n\n```\n# not a heading\n```\n## A\n") == {"a", "a-1"}


def test_every_relative_link_of_the_documentation_resolves():
    """Links and images between the pages (``[text](docs/models.md#the-authors-recipes)``, images) name files that
    exist and headings those files have."""
    broken = []
    for doc in DOCS:
        text = (ROOT / doc).read_text(encoding="utf-8")
        prose = re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (ROOT / doc).parent / path if path else ROOT / doc
            if not file.resolve().is_relative_to(ROOT) or not file.exists():
                broken.append(f"{doc}: {target} (no such file)")
            elif anchor and anchor not in anchors_of(file.read_text(encoding="utf-8")):
                broken.append(f"{doc}: {target} (no such heading)")
    assert broken == []


# -- the context every case runs in -------------------------------------------------------------------------------
TOY_GRID = ["grid.corpora=[toy_core17]", "grid.leakages=[none,test]", "grid.sizes=[384]", "grid.models=[knrm]",
            "grid.seeds=[1]"]
TOY_CELL = "leakexp cell corpus=toy_core17 leakage=test size=384 seed=1,2"
PAPER_TINY = ["grid.sizes=[1000]", "grid.seeds=[1]", "grid.models=[knrm]"]  # plan and status of 9 cells, not 9000


@pytest.fixture(scope="session")
def toy_store(tmp_path_factory, toy_prepared):
    """One toy-world store for every toy case, holding the toy world's data preparation at the tests' scale
    (tests/toy_upstream.py); the README's cell command computes its first cells."""
    import toy_upstream

    store = toy_upstream.seed(tmp_path_factory.mktemp("docs-store"), toy_prepared)
    return [f"store={store}", toy_upstream.TOY_600, "corpus=toy_core17"]


@pytest.fixture(scope="session")
def toy_cell(toy_store):
    """The README's ``leakexp cell corpus=toy_core17 leakage=test size=384 seed=1,2``, run once: (rc, stdout)."""
    import contextlib
    import io

    assert TOY_CELL in documented_commands()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main([*shlex.split(TOY_CELL)[1:], *(o for o in toy_store if not o.startswith("corpus="))])
    return rc, out.getvalue()


@dataclass
class Ctx:
    """What a case runs with: pytest's fixtures, the working directory (relative paths of the docs land there)."""

    request: pytest.FixtureRequest
    tmp: Path
    monkeypatch: pytest.MonkeyPatch
    capsys: pytest.CaptureFixture

    @property
    def toy(self) -> list[str]:
        return self.request.getfixturevalue("toy_store")

    def run(self, words: list[str], extra: list[str] = (), after: list[str] = ()) -> tuple[int, str, str]:
        """``leakexp WORDS`` in-process, ``extra`` overrides placed after the command (and action) names, ``after``
        options at the end; returns (rc, stdout, stderr)."""
        self.capsys.readouterr()
        head = 2 if words[0] in ("annotations", "resample") else 1
        given = {w.partition("=")[0] for w in words if "=" in w}
        extra = [e for e in extra if e.partition("=")[0] not in given]  # the command's own value wins
        try:
            rc = main([*words[:head], *extra, *words[head:], *after])
        except SystemExit as exc:  # argparse: --help, or a usage error
            rc = exc.code
        out, err = self.capsys.readouterr()
        return rc, out, err


def words(command: str, **subs: str) -> list[str]:
    """The argv of a documented leakexp command without ``leakexp``; placeholders replaced: a word equal to a key of
    ``subs`` (``…``, ``DIR``, ``[overrides]``) or a ``key=…`` value by ``subs[key]``."""
    out = []
    for w in shlex.split(command)[1:]:
        key, eq, value = w.partition("=")
        if w in subs:
            out += subs[w].split() if w == "[overrides]" else [subs[w]]
        elif eq and value == "…":
            out.append(f"{key}={subs[key]}")
        else:
            out.append(w)
    return out


def one_line_error(rc: int, err: str, *needles: str) -> str:
    """A refusal: exit 2, one line on stderr that starts with ``leakexp:`` and names each needle, no traceback."""
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("leakexp: "), err
    assert "Traceback" not in err and all(n in err for n in needles), err
    return lines[0]


def bare_paper(ctx: Ctx) -> list[str]:
    """experiment=paper on a machine without any of its inputs: no GloVe, variants, annotations or hub models."""
    for corpus in ("ROBUST04", "CORE17", "CORE18"):
        ctx.monkeypatch.delenv(f"LEAKEXP_VARIANTS_{corpus}", raising=False)
    ctx.monkeypatch.delenv("LEAKEXP_GLOVE", raising=False)
    empty = ctx.tmp / "empty-hub"
    empty.mkdir(exist_ok=True)
    ctx.monkeypatch.setenv("HF_HUB_CACHE", str(empty))
    return [f"store={ctx.tmp / 'paper-store'}"]


def furnished_paper(ctx: Ctx) -> list[str]:
    """experiment=paper with stand-ins for every input (annotations, variants, GloVe, the models in a hub cache)."""
    from test_hub import fake_cache
    from test_paper_needs import PAPER_MODELS  # pinned to their commits, as experiment=paper names them

    cache = ctx.tmp / "hub"
    if not cache.exists():
        cache.mkdir()
        fake_cache(cache, *PAPER_MODELS)
    ctx.monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return [*paper_env(ctx.tmp, ctx.monkeypatch)[1:], f"store={ctx.tmp / 'paper-store'}"]


def checks_before_data(overrides: list[str]):
    """Compose the overrides and pass every check a computing command makes before it reads data."""
    from leakexp.runner.registry import compose
    from leakexp.runner.registry import runner

    cfg = compose(overrides)
    runner(cfg)  # every stage's requirements (None: as a grid cell needs them), the input files included
    return cfg


# -- toy-world cases ----------------------------------------------------------------------------------------------
def case_toy_cell(ctx: Ctx, command: str) -> None:
    rc, out = ctx.request.getfixturevalue("toy_cell")
    assert rc == 0, out
    lines = out.splitlines()
    for seed in (1, 2):  # a comma list: every combination
        assert any(re.match(rf"toy_core17/test/384/knrm/seed-{seed}: MFR=\S+ +P@1=\S+ +nDCG@10=0\.\d{{4}}", line)
                   for line in lines), out


def case_toy_detect(ctx: Ctx, command: str) -> None:
    rc, out, err = ctx.run(words(command), ctx.toy)
    assert rc == 0, err
    assert re.search(r"^\d+ candidate rows; threshold 0\.8$", out, re.M) and "table 1: " in out
    table1 = Path(out.rsplit("table 1: ", 1)[1].split(".{")[0])
    assert all(table1.with_suffix(s).is_file() for s in (".md", ".csv", ".tex"))


def case_toy_verify(ctx: Ctx, command: str) -> None:
    rc, out, err = ctx.run(words(command), ctx.toy)
    assert rc == 0, err
    assert re.search(r"^toy_core17: \d+ verified leaking queries for \d+ topics \(\d+ distinct training queries\)$",
                     out, re.M), out
    assert re.search(r"^detection vs planted leaks at threshold 0.8: recall", out, re.M)


def case_toy_status_why(ctx: Ctx, command: str) -> None:
    ctx.request.getfixturevalue("toy_cell")
    argv = words(command, corpus="toy_core17", leakage="test", size="384", model="knrm", seed="1")
    rc, out, err = ctx.run(argv, ctx.toy)
    assert rc == 0, err
    assert re.search(r"^train\b", out, re.M) and re.search(r"^rerank\b", out, re.M), out


def case_toy_status_verify(ctx: Ctx, command: str) -> None:
    ctx.request.getfixturevalue("toy_cell")
    rc, out, err = ctx.run(words(command), [*ctx.toy, *TOY_GRID])
    assert rc in (0, 1), err  # complete or not, by what the other cases have computed so far
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:] if line.split()}
    assert {"toy", "detect", "train", "rerank", "evaluate"} <= rows.keys(), out
    assert all(r[3] == "0" for r in rows.values()), out  # every checksum re-read: nothing damaged


def case_toy_corpus_stats(ctx: Ctx, command: str) -> None:
    rc, out, err = ctx.run(words(command, **{"[overrides]": " ".join(ctx.toy)}))
    assert rc == 0, err
    for name in ("toy_core17", "toy_core18"):
        assert re.search(rf"^{name}_documents: \d+$", out, re.M) and f"{name}_topics_with_relevant: " in out
    assert re.search(r"^train_\S*documents: \d+$", out, re.M), out


def case_toy_index(ctx: Ctx, command: str) -> None:
    rc, out, err = ctx.run(words(command), ctx.toy)
    assert rc == 0, err
    for name in ("train", "toy_robust", "toy_core17", "toy_core18"):
        assert re.search(rf"^{name}: \S+ \(\d+ documents\)$", out, re.M), out


def case_toy_plan(ctx: Ctx, command: str) -> None:
    rc, out, err = ctx.run(words(command), [*ctx.toy, *TOY_GRID])
    assert rc == 0, err
    assert "job list: 2 cells (--jobs FILE writes them, one per line)" in out, out
    store = Path(next(o.split("=", 1)[1] for o in ctx.toy if o.startswith("store=")))
    assert not (store / "plan").exists()  # plan reads nothing and writes nothing


def case_toy_memorization(ctx: Ctx, command: str) -> None:
    rc, out, err = ctx.run(words(command), [*ctx.toy, *TOY_GRID])
    assert rc == 0, err
    written = [Path(line) for line in out.splitlines()]
    assert written and all(p.is_file() for p in written) and any(p.name.startswith("table6-") for p in written)


def case_toy_robustness(ctx: Ctx, command: str) -> None:
    rc, out, err = ctx.run(words(command), [*ctx.toy, *TOY_GRID, "robustness.ood=[]", "robustness.bootstrap=100"])
    assert rc == 0, err
    written = [Path(line) for line in out.splitlines()]
    assert any(p.name == "robustness_toy_core17.md" for p in written) and all(p.exists() for p in written), out


def case_toy_demo(ctx: Ctx, command: str) -> None:
    """``make demo``'s ``leakexp demo``, on a grid of two cells (robustness apart: ``leakexp robustness``)."""
    ctx.request.getfixturevalue("toy_cell")
    rc, out, err = ctx.run(words(command), [*ctx.toy, *TOY_GRID, "robustness.enabled=false"])
    assert rc == 0, err
    assert "2/2 cells done in " in out and re.search(r"^query_overlap: \d+ of \d+", out, re.M), out
    assert "graph audit (synthetic benchmark" in out
    tables = Path(out.rsplit("tables: ", 1)[1].strip())
    assert (tables / "table1.md").is_file() and (tables / "figure2.png").is_file()


def case_toy_demo_native(ctx: Ctx, command: str) -> None:
    """The demo with each library's own kernels: the command line asks for them before any library loads (a
    subprocess; this test's process loaded them long ago) and the configuration takes the mode."""
    from leakexp.runner.registry import compose

    argv = words(command)[1:]
    code = ("import os, sys; from leakexp.runner.kernels import pin_environment; "
            "print(pin_environment(sys.argv[1:]), os.environ.get('ATEN_CPU_CAPABILITY'), 'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k not in ("LEAKEXP_CPU_KERNELS", "ATEN_CPU_CAPABILITY")}
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["native", "None", "False"], done.stdout + done.stderr
    assert compose(argv[1:]).run.cpu_kernels == "native"


def case_toy_stages(ctx: Ctx, command: str) -> None:
    """Every stage listed with its version and module, computing nothing; with --graph its graph as an SVG."""
    import xml.etree.ElementTree as ET

    from leakexp.runner.stage import stages

    ctx.monkeypatch.chdir(ctx.tmp)
    store = ctx.tmp / "stages-store"
    rc, out, err = ctx.run(words(command), [f"store={store}"])
    assert rc == 0 and not store.exists(), err
    rows = {line.split()[0]: line.split()[1:4] for line in out.splitlines()[1:] if line and not line[0].isspace()}
    assert all(rows[s.name] == [str(s.version), s.module, "yes"] for s in stages()), out
    if "--graph" in command:
        path = ctx.tmp / words(command)[words(command).index("--graph") + 1]
        assert out.rstrip().endswith(f"graph: {path.name}")
        ids = {e.get("id") for e in ET.parse(path).getroot().iter()}
        assert {f"stage:{s.name}" for s in stages()} <= ids and "edge:build:train" in ids


def case_toy_tables(ctx: Ctx, command: str) -> None:
    ctx.request.getfixturevalue("toy_cell")
    rc, out, err = ctx.run(words(command), [*ctx.toy, *TOY_GRID])
    assert rc == 0, err
    tables = Path(out.rsplit("tables: ", 1)[1].strip())
    assert (tables / "table4.md").is_file() and (tables / "summary.md").is_file(), out


def case_toy_tables_variant(ctx: Ctx, command: str) -> None:
    """Table-only settings: the stored evaluations, tables in a folder named by the settings."""
    ctx.request.getfixturevalue("toy_cell")
    rc, out, err = ctx.run(words(command), [*ctx.toy, *TOY_GRID])
    assert rc == 0, err
    tables = Path(out.rsplit("tables: ", 1)[1].strip())
    assert tables.name == "evaluate.mfr=arithmetic,evaluate.mfr_missing=skip", out
    assert "arithmetic mean rank" in (tables / "table4.md").read_text()


def case_help(ctx: Ctx, command: str) -> None:
    rc, out, err = ctx.run(words(command))
    assert rc == 0
    listed = {line.split()[0] for line in out.split("commands (")[1].splitlines()[1:]
              if line.startswith("  ") and not line.startswith("   ")}
    assert {"demo", "cell", "tables", "status", "plan", "audit", "graph-audit", "annotations"} <= listed, out


def case_name(ctx: Ctx, command: str) -> None:
    """A command's bare name in the prose: it exists and explains itself (its full examples are cases)."""
    rc, out, err = ctx.run([*words(command), "--help"])
    assert rc == 0 and out.startswith("usage: leakexp " + " ".join(words(command))), out


def _user_corpus(ctx: Ctx) -> Path:
    """docs/data.md's own corpus: a copy of a shipped corpus file under its own name in a LEAKEXP_CONF directory."""
    conf = ctx.tmp / "my-conf"
    (conf / "corpus").mkdir(parents=True)
    text = (ROOT / "conf" / "corpus" / "toy_robust.yaml").read_text()
    (conf / "corpus" / "mycorpus.yaml").write_text(text.replace("name: toy_robust", "name: mycorpus"))
    ctx.monkeypatch.setenv("LEAKEXP_CONF", str(conf))
    ctx.monkeypatch.setenv("XDG_CONFIG_HOME", str(ctx.tmp / "xdg"))
    return conf


def case_user_corpus_cfg(ctx: Ctx, command: str) -> None:
    import yaml

    _user_corpus(ctx)
    store = ctx.tmp / "store"
    rc, out, err = ctx.run(words(command), [f"store={store}", "data.corpora=[toy_robust,mycorpus]"])
    assert rc == 0, err
    cfg = yaml.safe_load(out)
    assert cfg["corpus"]["name"] == "mycorpus" and cfg["store"] == str(store) and not store.exists()


def case_user_corpus_info(ctx: Ctx, command: str) -> None:
    conf = _user_corpus(ctx)
    rc, out, err = ctx.run(words(command))
    assert rc == 0, err
    assert out.splitlines()[1:3] == [f"  {conf}", f"  {ROOT / 'conf'}"], out
    assert "  corpus: core17, core18, mycorpus, robust04, toy_core17, toy_core18, toy_robust" in out


def case_groups_help(ctx: Ctx, command: str) -> None:
    _user_corpus(ctx)
    rc, out, err = ctx.run(words(command))
    assert rc == 0 and "config groups (" in out
    assert re.search(r"^  corpus +core17, core18, mycorpus, robust04", out, re.M), out


# -- experiment=paper --------------------------------------------------------------------------------------------
def case_paper_plan(ctx: Ctx, command: str) -> None:
    rc, out, err = ctx.run(words(command), [*bare_paper(ctx), *PAPER_TINY])
    assert rc == 0, err
    assert "job list: 9 cells (--jobs FILE writes them, one per line)" in out and "a run will still need" in out
    assert "(verify.annotations)" in out and "glove.6B.300d.txt" in out, out


def case_paper_status(ctx: Ctx, command: str) -> None:
    rc, out, err = ctx.run(words(command), [*bare_paper(ctx), *PAPER_TINY])
    assert rc == 1, err  # nothing done yet
    assert re.search(r"^train +0 ", out, re.M) and "a run will still need" in out, out


def case_paper_tables(ctx: Ctx, command: str) -> None:
    """From the store alone: with nothing computed, one line saying so (exit 2 without a store, 1 without results)."""
    overrides = [*bare_paper(ctx), *PAPER_TINY]
    rc, out, err = ctx.run(words(command), overrides)
    one_line_error(rc, err, "there is no store at")
    Path(next(o.split("=", 1)[1] for o in overrides if o.startswith("store="))).mkdir(parents=True)  # an empty store
    rc, out, err = ctx.run(words(command), overrides)  # the artifacts' keys need the annotations the grid used
    one_line_error(rc, err, "verify.annotations is not set")
    rc, out, err = ctx.run(words(command), [*furnished_paper(ctx), *PAPER_TINY])
    assert rc == 1 and len(err.strip().splitlines()) == 1 and err.startswith("leakexp: "), err


def case_paper_compute(ctx: Ctx, command: str, subs: dict | None = None, after: list[str] = ()) -> None:
    """A command that computes on the real data: without its inputs one line naming what it lacks; with them every
    check passes, so the next thing it does is to read the data."""
    argv = words(command, **(subs or {}))
    rc, out, err = ctx.run(argv, bare_paper(ctx), after)
    one_line_error(rc, err)
    assert not (ctx.tmp / "paper-store").exists()  # refused before any work
    overrides = [w for w in argv if "=" in w and not w.startswith("-")]
    cfg = checks_before_data([*overrides, *furnished_paper(ctx)])
    assert cfg.data.kind == "irds" and cfg.detect.threshold == 0.91


def case_paper_build(ctx: Ctx, command: str) -> None:
    rc, out, err = ctx.run(words(command), bare_paper(ctx), ["--export-monot5"])  # the option named beside it
    one_line_error(rc, err)
    case_paper_compute(ctx, command)


def missing_report(rc: int, out: str, what: str) -> str:
    """The one report of every missing input: its heading names the grid or the cell, then each input's lines."""
    assert out.startswith("leakexp: ") or re.match(r"^\d+ input\(s\) missing", out), out
    assert re.search(rf"^(leakexp: )?\d+ input\(s\) missing for {re.escape(what)}:$", out, re.M), out
    assert "Traceback" not in out and "from: " in out and "to: " in out, out
    return out


def case_paper_cell(ctx: Ctx, command: str) -> None:
    """On the bare machine the cell refuses with the one report, before any work, asking nothing of what a monoT5
    cell does not read (GloVe); with every input it passes every check."""
    argv = words(command)
    rc, out, err = ctx.run(argv, bare_paper(ctx))
    assert rc == 2
    report = missing_report(rc, err, "cell robust04/msm/16000/monot5/seed-3")
    assert "glove" not in report and "bert-base-uncased" not in report and "t5-base" in report
    assert not (ctx.tmp / "paper-store").exists()  # refused before any work
    from leakexp.stages.cell import cell_from_config

    cfg = checks_before_data([*words(command)[1:], *furnished_paper(ctx)])
    assert str(cell_from_config(cfg)) == "robust04/msm/16000/monot5/seed-3"


def case_paper_compare_runs(ctx: Ctx, command: str) -> None:
    from leakexp.data.judgments import run_path
    from leakexp.stages.firststage import first_stage_file

    case_paper_compute(ctx, command)
    argv = words(command)
    run = argv[argv.index("--run") + 1]
    assert run_path(run).is_file()  # the authors' run ships with leakexp
    cfg = checks_before_data(["experiment=paper", "rerank.first_stage=null", *furnished_paper(ctx)])
    assert first_stage_file(cfg.rerank.first_stage, "core17") is None  # leakexp's own BM25 of core17


def case_measure_bundled(ctx: Ctx, command: str) -> None:
    """The authors' BM25 run scored as the paper's tables score it: the figures docs/toolkit.md quotes."""
    rc, out, err = ctx.run(words(command))
    assert rc == 0, err
    assert out.splitlines()[1:5] == ["run: core17.bm25-anserini.top100 (50 topics)", "nDCG@10: 0.4095", "P@1: 0.6000",
                                     "MFR: 1.4249"], out


def _ranked_runs(ctx: Ctx, first: dict[str, list[int]]) -> None:
    """Gzipped TREC runs under the documented names: per topic of ``pair_files``, its relevant document at the rank
    given (1 or 2) before or after its judged non-relevant one."""
    for name, ranks in first.items():
        lines = []
        for i, (q, rank) in enumerate(zip(TOPICS, ranks)):
            docs = [f"D{i}" if i < 3 else f"X{q}", f"N{q}"][::1 if rank == 1 else -1]
            lines += [f"{q} Q0 {d} {r + 1} {10 - r} {name}\n" for r, d in enumerate(docs)]
        with gzip.open(ctx.tmp / name, "wt") as f:
            f.write("".join(lines))


def case_measure_per_topic(ctx: Ctx, command: str) -> None:
    """-q: trec_eval's lines, topic by topic, then the means as `all` rows (RR's mean is its lines' mean)."""
    ctx.request.getfixturevalue("pair_files")
    _ranked_runs(ctx, {"bm25.run.gz": [1, 2, 1, 2, 1, 1]})
    rc, out, err = ctx.run(words(command))
    assert rc == 0, err
    rows = [line.split("\t") for line in out.splitlines() if line.count("\t") == 2]
    assert [r[:2] for r in rows[:4]] == [["nDCG@10", "301"], ["P@1", "301"], ["RR", "301"], ["MFR", "301"]]
    rr = [float(v) for m, q, v in rows if m == "RR" and q != "all"]
    assert rr == [1, 0.5, 1, 0.5, 1, 1] and ["RR", "all", f"{sum(rr) / 6:.4f}"] in rows, out


def case_measure_compare(ctx: Ctx, command: str) -> None:
    """Three runs: MSM and Test each tested against None (the first run), Bonferroni over the two."""
    ctx.request.getfixturevalue("pair_files")
    _ranked_runs(ctx, {"none.run.gz": [2, 2, 2, 1, 2, 1], "msm.run.gz": [1, 1, 1, 1, 1, 1],
                       "test.run.gz": [1, 2, 1, 1, 2, 1]})
    rc, out, err = ctx.run(words(command))
    assert rc == 0, err
    assert "baseline: None (the first run given)" in out.splitlines()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines() if line.startswith("| ")]
    assert [r[:3] for r in rows[1:]] == [[run, m, "6"] for m in ("nDCG@10", "P@1", "MFR") for run in ("MSM", "Test")]


def case_paper_fetch(ctx: Ctx, command: str) -> None:
    """What the paper's grid reads from outside: ``--list`` says what would be fetched (the pinned models, GloVe, the
    annotation files and runs, ir_datasets' public files) and what must be placed by hand, and touches nothing; with
    downloads of models forbidden (HF_HUB_OFFLINE=1) each missing model fails in one line and the exit is 1. The
    downloads themselves run against a local server in tests/test_fetch.py; nothing here reaches the internet."""
    from http_files import no_internet
    from test_paper_needs import PAPER_MODELS

    no_internet(ctx.monkeypatch)
    ctx.monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    overrides = [*bare_paper(ctx), f"fetch.dir={ctx.tmp / 'downloads'}"]
    rc, out, err = ctx.run(words(command), overrides, ["--list"])
    assert rc == 0, err
    for pinned in PAPER_MODELS:
        repo, commit = pinned.split("@")
        assert f"to fetch Hugging Face model {repo} at {commit}" in out, out
    assert "to fetch word vectors glove.6B.300d.txt" in out and out.count("to fetch SPIRE-22 annotations") == 4
    assert out.count("to fetch SPIRE-22 run") == 2 and "the annotation files are found there by verify.annotations: null" in out
    assert "  - query variants of robust04: " in out.split("cannot be fetched (")[1], out
    assert not (ctx.tmp / "downloads").exists()
    rc, out, err = ctx.run(words(command), overrides, ["--only", "models"])
    assert rc == 1 and out.count("FAILED   Hugging Face model") == 3 and "HF_HUB_OFFLINE=1 forbids downloads" in out


def case_paper_annotations_sample(ctx: Ctx, command: str) -> None:
    rc, out, err = ctx.run(words(command), bare_paper(ctx))
    one_line_error(rc, err)
    checks_before_data(["experiment=paper", *furnished_paper(ctx)])


def case_real_audit(ctx: Ctx, command: str) -> None:
    """An audit of ir_datasets ids: without the study's SBERT model in the cache, one line naming it and the bundled
    alternative, before any data is read."""
    ctx.request.getfixturevalue("pair_files")
    argv = words(command)
    argv = [a.replace("/data/store", str(ctx.tmp / "data-store")) for a in argv]
    rc, out, err = ctx.run(argv, bare_paper(ctx))
    line = one_line_error(rc, err, "paraphrase-MiniLM-L6-v2", "is not in the local cache")
    assert line.endswith("the demo's model)") and ("--model bundled" in line or "detect.sbert=bundled" in line)
    assert not (ctx.tmp / "data-store").exists() and not (ctx.tmp / argv[argv.index("--out") + 1]).exists()


def _hydra_multirun(overrides: list[str]):
    """The Hydra config `leakexp-run -m OVERRIDES` composes (the launcher included), and its jobs' overrides."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from leakexp.runner.config import conf_dir

    GlobalHydra.instance().clear()
    parser = OverridesParser.create()
    parsed = parser.parse_overrides(overrides)
    plain = [o.input_line for o in parsed if not o.is_sweep_override()]
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=plain, return_hydra_config=True)
    GlobalHydra.instance().clear()
    given = {o.get_key_element(): list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.value()]
             for o in parsed}
    params = {k: str(v).split(",") for k, v in (cfg.hydra.sweeper.params or {}).items()}
    axes = [[f"{k}={v}" for v in given.get(k, vals)] for k, vals in params.items()]
    return cfg, [list(c) for c in itertools.product(*axes)], plain


def case_leakexp_run(ctx: Ctx, command: str) -> None:
    """``leakexp-run -m …`` (``make grid``): the launcher resolves, the sweep has the documented jobs, and a job
    refuses without the paper's inputs and passes every check with them."""
    from hydra.utils import get_class

    from leakexp.runner.registry import compose

    argv = shlex.split(command)
    assert argv[:2] == ["leakexp-run", "-m"]
    overrides = [a.replace("[…]", "[ann/01.jsonl,ann/02.jsonl,ann/03.jsonl,ann/04.jsonl]") for a in argv[2:]]
    cfg, jobs, plain = _hydra_multirun(overrides)
    get_class(cfg.hydra.launcher._target_)  # the launcher named (gpu_local, gpu_slurm) imports
    expected = 3 * 3 * 8 * 5 * 5
    for o in overrides:  # a comma list replaces the paper's axis
        key, _, value = o.partition("=")
        if "," in value and not value.startswith("["):
            expected = expected // 5 * len(value.split(","))
    assert len(jobs) == expected
    ann = [o for o in plain if o.startswith("verify.annotations=")]
    for name in ("ann/01.jsonl", "ann/02.jsonl", "ann/03.jsonl", "ann/04.jsonl"):
        (ctx.tmp / name).parent.mkdir(exist_ok=True)
        (ctx.tmp / name).write_text("{}\n")
    from leakexp.runner.registry import runner
    from leakexp.runner.stage import ConfigError

    job = [*plain, *jobs[0]]
    with pytest.raises(ConfigError) as refusal:  # what the job logs, before any work
        runner(compose([*job, *bare_paper(ctx)]))
    assert "\n" not in str(refusal.value)
    stand_ins = furnished_paper(ctx)
    if ann:  # the documented annotation files, relative to the working directory
        stand_ins = [s for s in stand_ins if not s.startswith("verify.annotations=")]
    checks_before_data([*job, *stand_ins])


def case_paper_check(ctx: Ctx, command: str) -> None:
    """``leakexp check``: on the bare machine every input the grid (or the cell) lacks, in one report, exit 1."""
    argv = words(command)
    rc, out, err = ctx.run(argv, bare_paper(ctx))
    assert rc == 1, err
    cell = "model=monot5" in argv
    report = missing_report(rc, out, "cell robust04/msm/16000/monot5/seed-3" if cell else "the configured grid")
    for corpus in ("robust04", "core17", "core18"):
        assert f"query variants of {corpus}" in report
    assert ("glove.6B.300d.txt" in report) is not cell
    assert not (ctx.tmp / "paper-store").exists()


# -- toolkit commands on small files ------------------------------------------------------------------------------
TOPICS = {"301": ("industrial espionage", "cases of industrial espionage between companies"),
          "302": ("hubble telescope achievements", "what the hubble space telescope found"),
          "303": ("jazz festival lineup", "musicians playing at jazz festivals"),
          "304": ("ferry sinkings", "ships carrying passengers that sank"),
          "305": ("organic farming yields", "crop yields of organic farms"),
          "306": ("volcanic ash aviation", "airplanes grounded by volcanic ash clouds")}
TRAIN = ["industrial espionage", "hubble telescope achievements", "jazz festival lineup", "cheap flights to rome",
         "how to bake sourdough bread", "best running shoes", "python list comprehension", "tax deadline 2019",
         "symptoms of flu", "capital of australia", "how tall is mount everest", "learn spanish fast",
         "used car prices", "wedding dress styles", "how to fix a flat tire", "solar panel cost",
         "chess opening principles", "coffee brewing methods", "knitting for beginners", "guitar chords chart",
         "dog training tips", "history of the roman empire", "stock market basics", "yoga for back pain"]


def _trec_topics(topics: dict) -> str:
    return "".join(f"<top>\n<num> Number: {q}\n<title> {t}\n<desc> Description:\n{d}\n<narr> Narrative:\nx\n</top>\n\n"
                   for q, (t, d) in topics.items())


@pytest.fixture
def pair_files(tmp_path, monkeypatch):
    """The toolkit's inputs under the documented names, in the working directory: three leaked topics (the same text
    and relevant document as a training query) and three others."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LEAKEXP_STORE", raising=False)
    (tmp_path / "train.tsv").write_text("".join(f"t{i}\t{q}\n" for i, q in enumerate(TRAIN)))
    (tmp_path / "train.qrels").write_text("".join(f"t{i} 0 D{i} 1\n" for i in range(len(TRAIN))))
    (tmp_path / "topics.txt").write_text(_trec_topics(TOPICS))
    (tmp_path / "test.qrels").write_text("".join(
        f"{q} 0 {'D' + str(i) if i < 3 else 'X' + q} 2\n{q} 0 N{q} 0\n" for i, q in enumerate(TOPICS)))
    half = len(TRAIN) // 2
    (tmp_path / "msmarco.tsv").write_text("".join(f"m{i}\t{q}\n" for i, q in enumerate(TRAIN[:half])))
    (tmp_path / "orcas.tsv").write_text("".join(f"o{i}\t{q}\n" for i, q in enumerate(TRAIN[half:])))
    (tmp_path / "m.qrels").write_text("".join(f"m{i} 0 D{i} 1\n" for i in range(half)))
    (tmp_path / "o.qrels").write_text("".join(f"o{i} 0 E{i} 1\n" for i in range(len(TRAIN) - half)))
    (tmp_path / "dev.tsv").write_text("".join(f"{q}\t{t}\n" for q, (t, _) in TOPICS.items()))
    (tmp_path / "dev.qrels").write_text((tmp_path / "test.qrels").read_text())
    (tmp_path / "V.tsv").write_text("301\tcorporate spying\n")
    return tmp_path


def case_audit_files(ctx: Ctx, command: str) -> None:
    ctx.request.getfixturevalue("pair_files")
    argv = words(command)
    rc, out, err = ctx.run(argv)
    # the study's model is not bundled: as written, one line naming it and the bundled alternative
    one_line_error(rc, err, "paraphrase-MiniLM-L6-v2", "--model bundled")
    rc, out, err = ctx.run(argv, after=["--model", "bundled"])
    assert rc == 0, err
    assert re.search(r"^query_overlap: 3 of 6 test queries", out, re.M), out
    assert re.search(r"^exact_duplicates: 3 of 6 test queries", out, re.M), out
    out_dir = Path(argv[argv.index("--out") + 1])
    assert {"report.md", "audit.json", "similarity.png", "neighbours.parquet"} <= {p.name for p in out_dir.iterdir()}


def case_audit_qrels_only(ctx: Ctx, command: str) -> None:
    """The qrels-only audit embeds nothing, and prints the line docs/toolkit.md shows (# -> label_overlap: N of M)."""
    ctx.request.getfixturevalue("pair_files")
    rc, out, err = ctx.run(words(command))
    assert rc == 0, err
    assert re.search(r"^label_overlap: 3 of 6 test queries \(50(\.0)?%\)", out, re.M), out
    assert (ctx.tmp / "labels" / "report.md").is_file()


def case_decontaminate(ctx: Ctx, command: str) -> None:
    ctx.request.getfixturevalue("pair_files")
    rc, out, err = ctx.run(words(command), after=["--model", "bundled"])
    assert rc == 0, err
    assert re.search(r"^removed: 3 of 24 training queries", out, re.M), out
    assert {"removed.csv", "matches.csv", "data.yaml"} <= {p.name for p in (ctx.tmp / "clean").iterdir()}


def case_restrain(ctx: Ctx, command: str) -> None:
    """extrapolate-eval's sizes count 14k-200k; on 24 training queries they are too large, said in one line; the
    same command with sizes the small files hold writes both kinds."""
    ctx.request.getfixturevalue("pair_files")
    argv = words(command, **{"…": "X"})
    files = {"--train": "train.tsv", "--train-qrels": "train.qrels", "--test": "topics.txt"}
    argv = [files.get(argv[i - 1], a) if a == "X" else a for i, a in enumerate(argv)]
    rc, out, err = ctx.run(argv, after=["--model", "bundled"])
    # the largest size that fits needs the embeddings (their progress comes first): the refusal names it at once
    errors = [line for line in err.strip().splitlines() if line.startswith("leakexp: ")]
    assert rc == 2 and len(errors) == 1 and err.strip().endswith(errors[0]) and "Traceback" not in err, err
    assert "--sizes: the largest size 200000 cannot be filled" in errors[0] and "choose sizes <= 12 " in errors[0]
    assert not (ctx.tmp / "rs").exists()  # nothing written
    small = argv[:argv.index("--sizes") + 1] + ["4", "8"] + argv[argv.index("--out"):]
    rc, out, err = ctx.run(small, after=["--model", "bundled"])
    assert rc == 0, err
    assert (ctx.tmp / "rs" / "restrain" / "8" / "extrapolate.train-qrel.txt").is_file(), out


def case_resttest(ctx: Ctx, command: str) -> None:
    ctx.request.getfixturevalue("pair_files")
    argv = words(command, **{"…": "X"})
    files = {"--train": "train.tsv", "--train-qrels": "train.qrels"}
    argv = [files.get(argv[i - 1], a) if a == "X" else a for i, a in enumerate(argv)]
    rc, out, err = ctx.run(argv, after=["--model", "bundled"])
    assert rc == 0, err
    buckets = sorted(p.name for p in (ctx.tmp / "rs" / "resttest").iterdir() if p.is_dir())
    assert buckets == [f"bucket-{k}" for k in range(1, 6)], out  # --buckets 5
    for bucket in buckets:
        written = {p.name for p in (ctx.tmp / "rs" / "resttest" / bucket).iterdir()}
        assert written == {"train-qrel.txt", "interpolate.dev-qrel.txt", "extrapolate.dev-qrel.txt"}


def case_split_eval(ctx: Ctx, command: str) -> None:
    """On the audit of the documented ``--out audit`` command, with two runs: once as written without the optional
    parts, then with each --leaked-by choice and --baseline."""
    ctx.request.getfixturevalue("pair_files")
    audit = "leakexp audit --train train.tsv --train-qrels train.qrels --test topics.txt --test-qrels test.qrels " \
            "--fields title description --out audit"
    assert audit in documented_commands()
    assert ctx.run(words(audit), after=["--model", "bundled"])[0] == 0
    for name, good in (("runA.trec.gz", True), ("runB.trec.gz", False)):
        lines = []
        for i, q in enumerate(TOPICS):
            relevant = f"D{i}" if i < 3 else f"X{q}"
            docs = [relevant, f"N{q}"] if good or i % 2 else [f"N{q}", relevant]
            lines += [f"{q} Q0 {d} {r + 1} {10 - r} {name}\n" for r, d in enumerate(docs)]
        with gzip.open(ctx.tmp / name, "wt") as f:
            f.write("".join(lines))
    base, optional = command.split(" [", 1)
    choices = re.findall(r"\[(--[\w-]+) ([^\]]+)\]", command)
    assert [c[0] for c in choices] == ["--leaked-by", "--baseline"]
    rc, out, err = ctx.run(words(base))
    assert rc == 0, err
    assert re.search(r"^3 leaked \(semantic\) and 3 other test queries with judgments", out, re.M), out
    assert (ctx.tmp / "audit" / "split-eval" / "split_eval.md").is_file()
    for leaked_by in choices[0][1].split("|"):
        rc, out, err = ctx.run(words(base), after=["--leaked-by", leaked_by, "--baseline", choices[1][1]])
        assert rc == 0 and f"3 leaked ({leaked_by}) and 3 other" in out, err


ADJ = {"train": "hot\tcold\tantonym\nhot\twarm\t1\nwarm\tcool\tantonym\ncool\tcold\tsynonym\nbig\tsmall\tantonym\n"
                "big\tlarge\tsynonym\nsmall\ttiny\tsynonym\nlarge\tlittle\tantonym\n",
       "val": "warm\tcold\tantonym\n",
       "test": "hot\tcool\tantonym\nlarge\tsmall\tantonym\ntiny\tlittle\tsynonym\nbig\ttiny\tantonym\n"}


def _graph_lines(out: str) -> None:
    assert re.search(r"^  a_parity_accuracy: \d\.\d{4}", out, re.M) and "a_parity_applicable: " in out, out
    assert "majority_class_rate: " in out and "cross_split_reverses" in out


def case_graph_split_files(ctx: Ctx, command: str) -> None:
    ctx.monkeypatch.chdir(ctx.tmp)
    ctx.monkeypatch.setenv("LEAKEXP_STORE", str(ctx.tmp / "store"))
    for split, text in ADJ.items():
        (ctx.tmp / f"adj.{split}").write_text(text)
    rc, out, err = ctx.run(words(command))
    assert rc == 0, err
    _graph_lines(out)
    assert "split test: 4 held-out edges" in out
    assert len(list((ctx.tmp / "store" / "graph-audit").rglob("table5.md"))) == 1  # <store>/graph-audit/<name>/<key>/


def case_graph_one_file(ctx: Ctx, command: str) -> None:
    ctx.monkeypatch.chdir(ctx.tmp)
    ctx.monkeypatch.setenv("LEAKEXP_STORE", str(ctx.tmp / "store"))
    (ctx.tmp / "edges.tsv").write_text("".join(line + f"\t{split}\n" for split, text in ADJ.items()
                                               for line in text.splitlines()))
    rc, out, err = ctx.run(words(command))
    assert rc == 0, err
    _graph_lines(out)
    assert "split val: 1 held-out edges" in out or "split val: 1 held-out edge" in out


def case_graph_synthetic(ctx: Ctx, command: str) -> None:
    ctx.monkeypatch.chdir(ctx.tmp)
    rc, out, err = ctx.run(words(command))
    assert rc == 0, err
    _graph_lines(out)
    assert (ctx.tmp / "store/graph-audit/synthetic/resplit-vertices/edges.tsv").is_file()
    assert re.search(r"^  a_parity_applicable: 0 of \d+", out, re.M)  # the vertex split leaves no path


WORDNET_HEADER = "  1 This software and database is being provided to you, the LICENSEE, by  \n"


def _tiny_wordnet(folder: Path, pairs: int = 12) -> Path:
    """A WordNet 3.0 `dict` folder with ``pairs`` antonym synset pairs of two lemmas each (data.adj only)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(pairs):
        a, b = 1000 + 20 * i, 1010 + 20 * i
        lines.append(f"{a:08d} 00 a 02 good{i} 0 fine{i} 0 001 ! {b:08d} a 0101 | gloss  \n")
        lines.append(f"{b:08d} 00 a 02 bad{i} 0 poor{i} 0 001 ! {a:08d} a 0101 | gloss  \n")
    (folder / "data.adj").write_text(WORDNET_HEADER + "".join(lines), encoding="latin-1")
    return folder


def case_wordnet(ctx: Ctx, command: str) -> None:
    """Without WordNet, one line naming the package docs/toolkit.md installs; LEAKEXP_WORDNET names another folder."""
    ctx.monkeypatch.chdir(ctx.tmp)
    ctx.monkeypatch.setenv("LEAKEXP_WORDNET", str(ctx.tmp / "no-wordnet"))
    argv = words(command, DIR="wordnet-out")
    rc, out, err = ctx.run(argv)
    one_line_error(rc, err, "wordnet-base", "no-wordnet")
    ctx.monkeypatch.setenv("LEAKEXP_WORDNET", str(_tiny_wordnet(ctx.tmp / "wn")))
    rc, out, err = ctx.run(argv)
    assert rc == 0, err
    _graph_lines(out)
    out_dir = ctx.tmp / argv[argv.index("--out") + 1]
    assert (out_dir / "table5.md").is_file() and (out_dir / "resplit-vertices").is_dir()


def case_apt_wordnet(ctx: Ctx, command: str) -> None:
    """An install step (not run): the package it installs is the one leakexp's WordNet errors name, in the folder
    ``--wordnet`` reads by default."""
    from leakexp.toolkit.graph_data import WORDNET_HELP

    assert command.split()[-1] == "wordnet-base" and "wordnet-base" in WORDNET_HELP
    assert "/usr/share/wordnet" in WORDNET_HELP


def _annotation(i: int, qid: str, topic: str, labels: list[str], sim: float = 0.95) -> dict:
    return {"id": i, "data": f"query {qid}", "label": labels, "title": "t", "topic": topic, "variant": "",
            "narrative": "", "description": "", "ms-marco-qid": qid, "cosine_similarity": sim}


def _write_annotations(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def case_kappa(ctx: Ctx, command: str) -> None:
    ctx.monkeypatch.chdir(ctx.tmp)
    argv = words(command)
    first = [_annotation(0, "1", "301", ["Title-Identical"]), _annotation(1, "2", "302", ["Different Topic"]),
             _annotation(2, "3", "303", ["Title-Generalization"])]
    second = [_annotation(0, "1", "301", ["Title-Identical"]), _annotation(1, "2", "302", ["Title-Identical"]),
              _annotation(2, "3", "303", ["Title-Generalization"])]
    _write_annotations(ctx.tmp / argv[2], first)
    _write_annotations(ctx.tmp / argv[3], second)
    rc, out, err = ctx.run(argv)
    assert rc == 0, err
    assert out.splitlines()[0] == "candidates: 3"
    assert [line.split(":")[0] for line in out.splitlines()[1:]] == ["kappa_leak", "kappa_type", "kappa_labels"]


def case_diff(ctx: Ctx, command: str) -> None:
    """Two stores whose first stored artifact differs (tests/test_diff.py's stages): it is listed first."""
    from test_diff import _rel, _store

    a, b = _store(ctx.tmp / "a", 0), _store(ctx.tmp / "b", 1)
    rc, out, err = ctx.run(words(command, STORE_A=str(a), STORE_B=str(b)))
    assert rc == 1, err
    assert out.splitlines()[3] == f"  {_rel(a, 'vectors')}  (its inputs are equal: the stores part here)", out
    assert ctx.run(words(command, STORE_A=str(a), STORE_B=str(a)))[0] == 0


def case_calibrate(ctx: Ctx, command: str) -> None:
    ctx.monkeypatch.chdir(ctx.tmp)
    sims = [0.99, 0.97, 0.95, 0.93, 0.91, 0.88, 0.85, 0.82]
    labels = [["Title-Identical"]] * 5 + [["Different Topic"]] + [["Title-Identical"]] * 2
    _write_annotations(ctx.tmp / "sample.jsonl", [_annotation(i, str(i), "301", lab, s)
                                                  for i, (s, lab) in enumerate(zip(sims, labels))])
    argv = words(command)
    rc, out, err = ctx.run(argv)
    assert rc == 0, err
    assert re.search(r"^8 judged pairs; lowest threshold with precision >= 0.9: 0\.\d{4}$", out, re.M), out
    assert {"calibration.csv", "calibration.png"} <= {p.name for p in (ctx.tmp / "DIR").iterdir()}


def case_table2(ctx: Ctx, command: str) -> None:
    ctx.monkeypatch.chdir(ctx.tmp)
    _write_annotations(ctx.tmp / "A.jsonl", [_annotation(0, "1", "301", ["Title-Identical"]),
                                             _annotation(1, "2", "302", ["Different Topic"])])
    _write_annotations(ctx.tmp / "B.jsonl", [_annotation(2, "3", "321", ["Title-Specialization"])])
    (ctx.tmp / "04.testset").write_text(_trec_topics({"301": ("a", "b"), "302": ("c", "d")}))
    (ctx.tmp / "core17.txt").write_text("301\n302\n321\n")
    (ctx.tmp / "core18.txt").write_text("321\n")
    rc, out, err = ctx.run(words(command))
    assert rc == 0, err
    assert {"table2a.md", "table2a.csv", "table2b.md", "table2b.tex"} <= {p.name for p in (ctx.tmp / "DIR").iterdir()}
    assert out.rstrip().endswith("table 2: DIR")


def case_benchmark_section(ctx: Ctx, command: str) -> None:
    """``python benchmarks/run.py SECTION`` (not run: minutes): the script has that section."""
    script, section = command.split()[1:3]
    tree = ast.parse((ROOT / script).read_text())
    sections = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                    and getattr(node.targets[0], "id", "") == "SECTIONS")
    assert section in [k.value for k in sections.keys]


# -- make targets -------------------------------------------------------------------------------------------------
_VENV = "/nonexistent-venv"


_MAKE_STATE = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "ARGS")


def make_env(extra: dict | None = None) -> dict:
    """The environment a documented ``make`` command runs in: the user's, without what an enclosing ``make`` passes
    down (``make test ARGS=-x`` puts ``ARGS=-x`` in MAKEFLAGS, and every make these tests start would add it to its
    recipes)."""
    return {**{k: v for k, v in os.environ.items() if k not in _MAKE_STATE}, **(extra or {})}


def recipe(command: str) -> list[str]:
    """The commands ``make`` would run for a documented make command (dry run; the set-up step counted as done)."""
    env_words = shlex.split(command)
    env = {k: v for k, _, v in (w.partition("=") for w in env_words[:env_words.index("make")])}
    args = env_words[env_words.index("make") + 1:]
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    result = subprocess.run(["make", "-n", "-s", "-o", f"{_VENV}/.installed", f"VENV={_VENV}", *args], cwd=ROOT,
                            capture_output=True, text=True, env=make_env(env), timeout=60)
    assert result.returncode == 0, result.stderr
    return [line.replace(f"{_VENV}/bin/", "").strip() for line in result.stdout.splitlines() if line.strip()]


def case_make_leakexp(ctx: Ctx, command: str) -> None:
    """A target whose recipe is one leakexp command: that command is a case of its own, run here."""
    lines = recipe(command)
    assert len(lines) == 1 and lines[0].startswith(("leakexp ", "leakexp-run ")), lines
    leakexp = " ".join(lines[0].split())
    assert leakexp in CASES or leakexp in RECIPES, f"{command}: its recipe {leakexp!r} has no case"
    kind, check = CASES.get(leakexp) or RECIPES[leakexp]
    env = dict(w.partition("=")[::2] for w in shlex.split(command)[:shlex.split(command).index("make")])
    for key, value in env.items():
        ctx.monkeypatch.setenv(key, str(ctx.tmp / value.lstrip("/")) if key == "LEAKEXP_STORE" else value)
    if "LEAKEXP_STORE" in env:  # the store a grid job writes to is the one the environment names
        from leakexp.runner.registry import compose

        assert str(compose(["experiment=paper"]).run.store) == str(ctx.tmp / env["LEAKEXP_STORE"].lstrip("/"))
    check(ctx, leakexp)


def _pytest_markers() -> set[str]:
    import tomllib

    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    return {m.split(":")[0] for m in markers}


def case_make_pytest(ctx: Ctx, command: str) -> None:
    """A test target (not run here: it is the suite): its recipe runs pytest on marker names pytest knows and on
    files that exist."""
    lines = recipe(command)
    pytest_line = next(line for line in lines if " -m pytest " in line)
    expression = re.search(r'-m "([^"]+)"|-m (\w+)', pytest_line.split(" -m pytest ", 1)[1])
    names = set(re.findall(r"\w+", next(g for g in expression.groups() if g))) - {"not", "and", "or"}
    assert names <= _pytest_markers(), names
    for path in re.findall(r"\S+\.py", pytest_line):
        assert (ROOT / path).is_file(), path
    if command == "make test-kernels":
        assert pytest_line.startswith("ATEN_CPU_CAPABILITY=default ")
    parallel = " -n auto --maxprocesses 4 --dist loadgroup " in pytest_line
    assert parallel == (command in ("make test", "make test-kernels", "make test-slow", "make test-all")), \
        pytest_line  # the CPU suites


def case_cpu_slurm_run(ctx: Ctx, command: str) -> None:
    """``leakexp-run -m experiment=demo corpus=toy_core17 leakage=none,msm size=64,128 hydra/launcher=cpu_slurm``: leakexp's SLURM launcher, asking for no GPU (a CPU
    partition rejects gres), modest CPUs and memory, several cells per job as the plan counts; the demo's sweep
    (tests/test_slurm.py submits it to a real SLURM)."""
    from hydra.utils import get_class

    from leakexp.runner.registry import compose

    argv = shlex.split(command)
    cfg, _, plain = _hydra_multirun(argv[2:])
    launcher = cfg.hydra.launcher
    assert get_class(launcher._target_).__name__ == "CellSlurmLauncher"
    assert launcher.gpus_per_node is None and launcher.gres is None
    assert launcher.cpus_per_task <= 2 and launcher.mem_gb <= 4
    assert launcher.cells_per_job == compose(["experiment=demo"]).plan.cells_per_job
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(argv[2:])
    axes = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] for o in parsed if o.is_sweep_override()]
    assert sorted(" ".join(c) for c in itertools.product(*axes)) == sorted(
        f"leakage={leak} size={size}" for leak in ("none", "msm") for size in (64, 128))  # 4 cells: one job of 4
    assert "corpus=toy_core17" in plain


def case_make_test_gpu(ctx: Ctx, command: str) -> None:
    """On a machine without CUDA it says so and exits non-zero (run for real there); with CUDA: the recipe."""
    import torch

    case_make_pytest(ctx, command)
    if torch.cuda.is_available():
        return
    venv = Path(sys.executable).parents[1]
    result = subprocess.run(["make", "-s", "-o", f"{venv}/.installed", f"VENV={venv}", "test-gpu"], cwd=ROOT,
                            capture_output=True, text=True, env=make_env(), timeout=120)
    assert result.returncode != 0 and "test-gpu: no CUDA device here" in result.stdout, result.stdout


def case_make_help(ctx: Ctx, command: str) -> None:
    result = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, env=make_env(),
                            timeout=60)
    assert result.returncode == 0
    listed = {line.split()[0] for line in result.stdout.splitlines() if line.strip()}
    documented = {shlex.split(c)[shlex.split(c).index("make") + 1] for c in documented_commands()
                  if "make" in shlex.split(c) and len(shlex.split(c)) > shlex.split(c).index("make") + 1}
    assert documented <= listed, documented - listed


def case_make_bench_gpu(ctx: Ctx, command: str) -> None:
    """The GPU machine's one command: the GPU tests, the gpu bench, then the paper's plan from the file the bench
    writes where plan reads it (both under the store); on a machine without CUDA it says so and exits non-zero."""
    import torch

    lines = recipe(command)
    assert "torch.cuda.is_available()" in lines[0] and "bench-gpu: no CUDA device here" in lines[0], lines
    steps = " ".join(lines[1:])
    order = [steps.index(s) for s in ("python -m pytest -m gpu", "python benchmarks/run.py gpu",
                                      "leakexp plan experiment=paper")]
    assert order == sorted(order), steps
    assert "gpu" in [k.value for k in next(node.value for node in ast.parse((ROOT / "benchmarks" / "run.py").read_text()).body
                                           if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SECTIONS").keys]
    if torch.cuda.is_available():
        return
    venv = Path(sys.executable).parents[1]
    result = subprocess.run(["make", "-s", "-o", f"{venv}/.installed", f"VENV={venv}", "bench-gpu"], cwd=ROOT,
                            capture_output=True, text=True, env=make_env(), timeout=120)
    assert result.returncode != 0 and "bench-gpu: no CUDA device here" in result.stdout, result.stdout


def _dry_run(target: str, venv: str) -> list[str]:
    result = subprocess.run(["make", "-n", "-s", f"VENV={venv}", target], cwd=ROOT, capture_output=True, text=True,
                            env=make_env(), timeout=60)
    assert result.returncode == 0, result.stderr
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def case_make_setup(ctx: Ctx, command: str) -> None:
    """A fresh environment: the pinned pip, the CPU torch, then leakexp under requirements.lock's versions."""
    steps = " ; ".join(_dry_run("setup", str(ctx.tmp / "fresh-venv")))
    order = [steps.index(s) for s in ("pip install -q pip==", "pip install -q torch==2.13.0",
                                      "pip install -q -c requirements.lock -e '.[dev]'", "--no-deps pyserini==")]
    assert order == sorted(order), steps


def case_make_lock(ctx: Ctx, command: str) -> None:
    """The lock resolved in a fresh environment without the old lock's constraints, frozen over it."""
    steps = _dry_run("lock", str(ctx.tmp / "unused"))
    joined = " ; ".join(steps)
    assert "-m venv .lock-venv" in joined and "pip install -q -e '.[dev]'" in joined and "-c requirements" not in joined
    assert "pip freeze --exclude-editable" in joined and "mv requirements.lock.new requirements.lock" in joined


def case_make_bench(ctx: Ctx, command: str) -> None:
    lines = recipe(command)
    assert lines == ["python benchmarks/run.py"], lines
    assert (ROOT / "benchmarks" / "run.py").is_file()


# -- the table ----------------------------------------------------------------------------------------------------
def _paper(**subs):
    return lambda ctx, command: case_paper_compute(ctx, command, subs)


CASES = {
    # README.md: the two commands, the real grid, one cell
    "make demo": ("make", case_make_leakexp),
    "make demo ARGS=cpu_kernels=native": ("make", case_make_leakexp),
    "make test": ("make", case_make_pytest),
    "make setup": ("make", case_make_setup),
    "make lock": ("make", case_make_lock),
    "make test PARALLEL=": ("make", case_make_pytest),
    "make fetch": ("make", case_make_leakexp),
    "leakexp fetch experiment=paper": ("paper", case_paper_fetch),
    "make plan EXPERIMENT=paper": ("make", case_make_leakexp),
    "make check": ("make", case_make_leakexp),
    "leakexp check experiment=paper": ("paper", case_paper_check),
    "make check CORPUS=robust04 LEAKAGE=msm SIZE=16000 MODEL=monot5 SEED=3": ("make", case_make_leakexp),
    "make grid": ("make", case_make_leakexp),
    "make status EXPERIMENT=paper": ("make", case_make_leakexp),
    "make tables EXPERIMENT=paper": ("make", case_make_leakexp),
    "leakexp robustness experiment=paper": ("paper", _paper()),
    "make cell CORPUS=robust04 LEAKAGE=msm SIZE=16000 MODEL=monot5 SEED=3": ("make", case_make_leakexp),
    "leakexp cell experiment=paper corpus=robust04 leakage=msm size=16000 model=monot5 seed=3":
        ("paper", case_paper_cell),
    TOY_CELL: ("toy", case_toy_cell),
    "leakexp-run -m experiment=paper model=knrm,duet seed=1,2": ("paper", case_leakexp_run),
    # README.md and docs/toolkit.md: audit any train/test pair
    "leakexp audit store=/data/store --train msmarco-passage/train/judged --test msmarco-passage/trec-dl-2019/judged "
    "--out audit-dl19": ("paper", case_real_audit),
    "leakexp audit --train train.tsv --train-qrels train.qrels --test topics.txt --test-qrels test.qrels --fields "
    "title description --out audit": ("files", case_audit_files),
    "leakexp audit --train-qrels train.qrels --test-qrels test.qrels --test-rel 2 --out labels":
        ("files", case_audit_qrels_only),
    "leakexp audit experiment=paper --train msmarco-document/train msmarco-document/orcas --test "
    "disks45/nocr/trec-robust-2004 nyt/trec-core-2017 wapo/v2/trec-core-2018 --fields title description variant "
    "--test-variants V.tsv --out audit-paper": ("paper", case_real_audit),
    "leakexp decontaminate --train msmarco.tsv orcas.tsv --train-qrels m.qrels o.qrels --test topics.txt --threshold "
    "0.91 --out clean": ("files", case_decontaminate),
    "leakexp resample restrain --train … --train-qrels … --test … --sizes 14000 45000 200000 --out rs":
        ("files", case_restrain),
    "leakexp resample resttest --train … --train-qrels … --test dev.tsv --test-qrels dev.qrels --buckets 5 --seed 0 "
    "--out rs": ("files", case_resttest),
    "leakexp measure": ("name", case_name),
    "leakexp fetch": ("name", case_name),
    "leakexp check": ("name", case_name),
    "leakexp measure RUN... --qrels QRELS": ("name", lambda ctx, c: case_name(ctx, "leakexp measure")),
    "leakexp split-eval": ("name", lambda ctx, c: case_name(ctx, "leakexp split-eval")),
    "leakexp measure bundled:core17.bm25-anserini.top100.run.gz --qrels bundled:qrels.core17.txt.gz experiment=paper":
        ("files", case_measure_bundled),
    "leakexp measure -m nDCG@10 P@1 RR MFR -q bm25.run.gz --qrels test.qrels": ("files", case_measure_per_topic),
    "leakexp measure None=none.run.gz MSM=msm.run.gz Test=test.run.gz --qrels test.qrels --depth 100":
        ("files", case_measure_compare),
    "leakexp split-eval A=runA.trec.gz B=runB.trec.gz --qrels test.qrels --audit audit [--leaked-by "
    "semantic|exact|label|any] [--baseline A]": ("files", case_split_eval),
    # docs/toolkit.md: graph benchmarks
    "leakexp graph-audit --resplit vertices --out store/graph-audit/synthetic": ("files", case_graph_synthetic),
    "leakexp graph-audit train=adj.train val=adj.val test=adj.test": ("files", case_graph_split_files),
    "leakexp graph-audit edges.tsv": ("files", case_graph_one_file),
    "sudo apt-get install wordnet-base": ("system", case_apt_wordnet),
    "leakexp graph-audit --wordnet --pos adj --resplit vertices --out store/graph-audit/wordnet-adj": ("files", case_wordnet),
    # README.md and docs/*.md: inline examples
    "leakexp status --why train rerank corpus=… leakage=… size=… model=… seed=…": ("toy", case_toy_status_why),
    "leakexp stages": ("toy", case_toy_stages),
    # docs/data.md: your own corpora
    "leakexp train --help": ("name", case_groups_help),
    "leakexp cell --cfg job corpus=mycorpus": ("name", case_user_corpus_cfg),
    "leakexp cell --info": ("name", case_user_corpus_info),
    "leakexp diff STORE_A STORE_B": ("files", case_diff),
    "leakexp tables evaluate.mfr=arithmetic evaluate.mfr_missing=skip": ("toy", case_toy_tables_variant),
    "leakexp diff": ("name", case_name),
    "leakexp stages --graph stages.svg": ("toy", case_toy_stages),
    "make help": ("make", case_make_help),
    "leakexp --help": ("name", case_help),
    "leakexp corpus-stats [overrides]": ("toy", case_toy_corpus_stats),
    "leakexp annotations kappa": ("name", case_name),
    "leakexp verify": ("toy", case_toy_verify),
    "make plan": ("make", case_make_leakexp),
    "make bench": ("make", case_make_bench),
    "leakexp status --verify": ("toy", case_toy_status_verify),
    'make grid ARGS="hydra/launcher=gpu_local"': ("make", case_make_leakexp),
    'LEAKEXP_STORE=/shared/leakexp-store make grid ARGS="hydra/launcher=gpu_slurm"':
        ("make", case_make_leakexp),
    "leakexp compare-runs --corpus core17 --run bundled:core17.bm25-anserini.top100.run.gz experiment=paper "
    "rerank.first_stage=null": ("paper", case_paper_compare_runs),
    "leakexp index": ("toy", case_toy_index),
    "leakexp annotations kappa A B": ("files", case_kappa),
    "leakexp memorization": ("toy", case_toy_memorization),
    "leakexp robustness": ("toy", case_toy_robustness),
    "make grid": ("make", case_make_leakexp),
    "make tables": ("make", case_make_leakexp),
    "leakexp plan": ("toy", case_toy_plan),
    "leakexp audit": ("name", case_name),
    "leakexp graph-audit": ("name", case_name),
    "make test-kernels": ("make", case_make_pytest),
    "make test-slow": ("make", case_make_pytest),
    "make test-all": ("make", case_make_pytest),
    "make test-slurm": ("make", case_make_pytest),
    "leakexp-run -m experiment=demo corpus=toy_core17 leakage=none,msm size=64,128 hydra/launcher=cpu_slurm":
        ("toy", case_cpu_slurm_run),
    "make test-gpu": ("make", case_make_test_gpu),
    "make bench-gpu": ("make", case_make_bench_gpu),
    "leakexp plan experiment=paper": ("paper", case_paper_plan),
    "python benchmarks/run.py pipeline": ("system", case_benchmark_section),
    "python benchmarks/run.py demo": ("system", case_benchmark_section),
    # experiments/README.md
    "leakexp detect experiment=paper": ("paper", _paper()),
    "leakexp detect": ("toy", case_toy_detect),
    "leakexp annotations sample experiment=paper --out sample.jsonl": ("paper", case_paper_annotations_sample),
    "leakexp annotations calibrate --judged sample.jsonl --out DIR": ("files", case_calibrate),
    "leakexp annotations table2 --annotations A.jsonl B.jsonl --corpus robust04=04.testset --corpus core17=core17.txt "
    "--corpus core18=core18.txt --out DIR": ("files", case_table2),
    "leakexp annotations kappa A.jsonl B.jsonl": ("files", case_kappa),
    "leakexp build experiment=paper": ("paper", case_paper_build),
    "leakexp memorization experiment=paper": ("paper", _paper()),
    "leakexp audit experiment=paper --train … --test … --out DIR": ("paper", lambda ctx, c: case_real_audit(
        ctx, c.replace("--train …", "--train msmarco-document/train").replace("--test …", "--test nyt/trec-core-2017"))),
    "leakexp decontaminate …": ("name", lambda ctx, c: case_name(ctx, "leakexp decontaminate")),
    "leakexp resample restrain …": ("name", lambda ctx, c: case_name(ctx, "leakexp resample restrain")),
    "leakexp graph-audit --wordnet --pos adj --resplit vertices --out DIR": ("files", case_wordnet),
}

# leakexp commands that only a make recipe spells out
RECIPES = {
    "leakexp demo": ("toy", case_toy_demo),
    "leakexp demo cpu_kernels=native": ("toy", case_toy_demo_native),
    "leakexp status experiment=paper": ("paper", case_paper_status),
    "leakexp tables experiment=paper": ("paper", case_paper_tables),
    "leakexp tables experiment=demo": ("toy", case_toy_tables),
    "leakexp plan experiment=demo": ("toy", case_toy_plan),
    "leakexp-run -m experiment=paper": ("paper", case_leakexp_run),
    "leakexp-run -m experiment=paper verify.annotations=[ann/01.jsonl,ann/02.jsonl,ann/03.jsonl,ann/04.jsonl]":
        ("paper", case_leakexp_run),
    "leakexp-run -m experiment=paper hydra/launcher=gpu_local": ("paper", case_leakexp_run),
    "leakexp-run -m experiment=paper hydra/launcher=gpu_slurm": ("paper", case_leakexp_run),
    "leakexp check experiment=paper corpus=robust04 leakage=msm size=16000 model=monot5 seed=3":
        ("paper", case_paper_check),
}


def test_every_documented_command_has_a_case():
    found = documented_commands()
    assert len(found) > 40
    assert [c for c in found if c not in CASES] == [], "documented commands without a case in tests/test_docs.py"
    assert [c for c in CASES if c not in found] == [], "cases of commands the documentation no longer has"


# `make demo` runs the whole demo (about 50 s here): CI runs it after the suite, make test-all here
SLOW_COMMANDS = {"make demo"}


def _marks(command: str) -> list:
    """Slow cases apart; under pytest-xdist the cases on the toy store (and the make targets, whose recipes run
    them) in one worker, which builds that store once."""
    marks = [pytest.mark.slow] if command in SLOW_COMMANDS else []
    if CASES[command][0] in ("toy", "make"):
        marks.append(pytest.mark.xdist_group("docs-toy-store"))
    return marks


@pytest.mark.parametrize("command", [pytest.param(c, marks=_marks(c)) for c in CASES], ids=lambda c: c[:60])
def test_documented_command(command, request, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LEAKEXP_STORE", raising=False)
    kind, check = CASES[command]
    check(Ctx(request, tmp_path, monkeypatch, capsys), command)


def test_make_recipes_are_read_alike_under_an_enclosing_make(monkeypatch):
    """``make test ARGS=-x`` runs these tests inside make: its MAKEFLAGS (and an exported ARGS) must not leak into
    the recipes they read."""
    plain = recipe("make plan")
    monkeypatch.setenv("MAKEFLAGS", " -- ARGS=--durations=5")
    monkeypatch.setenv("MAKELEVEL", "1")
    monkeypatch.setenv("ARGS", "-x")
    assert recipe("make plan") == plain == ["leakexp plan experiment=demo"]


def test_make_runs_python_with_compiled_modules_kept_whatever_the_environment():
    """Every test worker, grid worker and command started by make would otherwise compile leakexp and the tests again
    where the environment sets PYTHONDONTWRITEBYTECODE (about 6 s a process)."""
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    probe = 'probe: ; @$(PYTHON) -c "import sys; print(sys.dont_write_bytecode)"'
    result = subprocess.run(["make", "-s", "--eval", probe, "probe"], cwd=ROOT, capture_output=True, text=True,
                            env=make_env({"PYTHONDONTWRITEBYTECODE": "1"}), timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
