"""The package's structure: folders by role whose imports point one way, a stage found by its name, imports at the
top of modules; no module imports one that imports it back, the runner names no stage, stages import neither the
runner nor the table writers, and ``config``/``store`` import no stage; the Layout page of docs/development.md
lists every module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx

import leakexp
from leakexp.runner.registry import sections
from leakexp.runner.stage import stages

STAGES = stages()
from leakexp.runner.config import RunSettings

ROOT = Path(leakexp.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(("leakexp", *path.relative_to(ROOT).with_suffix("").parts))
        out[name.removesuffix(".__init__")] = path
    return out


def import_graph() -> nx.DiGraph:
    """Module -> module it imports, counting imports inside functions too (they are dependencies all the same)."""
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            for t in targets:
                if t in modules and t not in (name, "leakexp"):
                    graph.add_edge(name, t)
    return graph


def test_the_graph_sees_imports_inside_functions():
    g = import_graph()
    assert g.has_edge("leakexp.runner.registry", "leakexp.runner.pipeline")  # module level
    assert g.has_edge("leakexp.tables.paper", "leakexp.tables.memorization")  # inside write_tables


def test_no_import_circle():
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert cycles == []


def _stage_modules() -> set[str]:
    return {s.module for s in STAGES}


def test_stages_import_neither_runner_nor_writers_and_config_imports_no_stage():
    g = import_graph()
    stage_modules = _stage_modules()
    assert {"leakexp.stages.build", "leakexp.stages.train", "leakexp.stages.memorization",
            "leakexp.stages.robustness.parts"} <= stage_modules
    # ``report`` is the format library (Markdown, LaTeX, CSV writers) that any report-writing capability may
    # use, e.g. the graph audit; the table assemblers that read the grid's artifacts sit above every stage
    above = {"leakexp.runner.pipeline", "leakexp.runner.registry", "leakexp.grid.work", "leakexp.tables.paper", "leakexp.tables.memorization", "leakexp.tables.robustness", "leakexp.cli.commands", "leakexp.cli.main", "leakexp.runner.lineage",
             "leakexp.cli.plan", "leakexp.api", "leakexp"}
    for module in stage_modules:
        assert not set(nx.descendants(g, module)) & above, (module, set(nx.descendants(g, module)) & above)
    for module in ("leakexp.runner.config", "leakexp.runner.store", "leakexp.runner.stage", "leakexp.runner.pipeline"):
        assert not set(nx.descendants(g, module)) & stage_modules, module
    assert "leakexp.runner.pipeline" not in nx.descendants(g, "leakexp.toolkit.audit")


def test_the_runner_names_no_stage_and_stays_small():
    text = (ROOT / "runner" / "pipeline.py").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    for stage in STAGES:
        assert f'"{stage.name}"' not in text and f"'{stage.name}'" not in text, stage.name


# the folders of leakexp from the top floor down: a module imports only modules of its own folder or of folders below
FOLDERS = ("cli", "tables", "grid", "stages", "toolkit", "models", "lib", "data", "runner")
# the Python API (leakexp/api.py, which leakexp/__init__.py names lazily) sits on the top floor beside cli: it may import
# every folder below, and it and cli import neither the other
API = {"leakexp": "api", "leakexp.api": "api"}
# modules that hold several stages, named after their family (every other stage is in stages/<its name>.py)
FAMILIES = {"sources": {"pool", "collection"}, "detect": {"embed", "detect"}, "verify": {"verify", "leaks"},
            "build": {"fillers", "negatives", "build"}}


def _folder(module: str) -> str:
    if module in API:
        return API[module]
    parts = module.split(".")
    assert len(parts) >= 2 and parts[1] in FOLDERS, f"{module} is in no folder of {FOLDERS}"
    return parts[1]


def _floor(folder: str) -> int:
    return 0 if folder == "api" else FOLDERS.index(folder)


def test_every_module_is_in_a_folder_and_folders_import_one_way():
    g = import_graph()
    modules = [m for m in g if m != "leakexp"]
    assert {_folder(m) for m in modules} == {*FOLDERS, "api"}
    back = sorted(f"{a} -> {b}" for a, b in g.edges
                  if _floor(_folder(a)) > _floor(_folder(b)) or {_folder(a), _folder(b)} == {"api", "cli"})
    assert back == [], "imports that run back up the floors"


def test_a_stage_is_found_by_its_name():
    for stage in STAGES:
        folder, _, module = stage.module.removeprefix("leakexp.").partition(".")
        module = module.split(".")[0]  # a family's package: robustness/query-attack in stages/robustness/
        family = stage.family.replace("-", "_")
        assert folder == "stages" and (module == family or stage.name in FAMILIES.get(module, ())), \
            (stage.name, stage.module)


def test_imports_sit_at_the_top_of_modules():
    """Inside functions only where a module defers a heavy optional dependency or the CLI's lazy dispatch keeps
    ``leakexp measure`` light: at most 15 % of the package's own imports."""
    top = inside = 0
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("leakexp"):
                inside += id(node) in nested
                top += id(node) not in nested
    assert top > 200 and inside / (top + inside) <= 0.15, (top, inside)


def _layout() -> dict[str, set[str]]:
    """The modules docs/development.md's Layout lists, per folder: the ``- `name.py`: …`` items under each
    ``### `folder/``` heading."""
    text = (ROOT.parent / "docs" / "development.md").read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    listed: dict[str, set[str]] = {}
    folder = None
    for line in section.splitlines():
        if heading := re.match(r"^### `([\w/]+/)`$", line):
            folder = heading.group(1)
            listed.setdefault(folder, set())
        elif (item := re.match(r"^- `(\w+\.py)`: ", line)) and folder:
            listed[folder].add(item.group(1))
    return listed


def test_the_layout_page_lists_every_module():
    """Every module of the package and of the launcher plugin has its line on the Layout page, in its folder's list,
    and the page lists no module that does not exist (an empty ``__init__.py`` only marks a package)."""
    repo = ROOT.parent
    modules: dict[str, set[str]] = {}
    for top in (ROOT, repo / "hydra_plugins"):
        for path in top.rglob("*.py"):
            if path.name == "__init__.py" and not path.read_text(encoding="utf-8").strip():
                continue
            modules.setdefault(f"{path.parent.relative_to(repo).as_posix()}/", set()).add(path.name)
    listed = _layout()
    missing = {f"{folder}{name}" for folder, names in modules.items() for name in names - listed.get(folder, set())}
    unknown = {f"{folder}{name}" for folder, names in listed.items() for name in names - modules.get(folder, set())}
    assert missing == set(), f"modules not on the Layout page of docs/development.md: {sorted(missing)}"
    assert unknown == set(), f"the Layout page lists modules that do not exist: {sorted(unknown)}"


def _module_level_names() -> dict[str, list[str]]:
    """Public name -> the package modules that define it at module level (functions, classes, assignments)."""
    found: dict[str, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                continue
            for name in names:
                if not name.startswith("_") and name != "log":  # every module's logger is `log`
                    found.setdefault(name, []).append(path.relative_to(ROOT.parent).as_posix())
    return found


def test_no_two_modules_define_the_same_public_name():
    """A name leads to one thing: three STAGES or three settings() would send a reader to the wrong one."""
    shared = {name: paths for name, paths in _module_level_names().items() if len(paths) > 1}
    assert shared == {}


def test_model_labels_are_defined_once_by_the_models():
    """How a table names a model comes from the model's module (LABEL), never from a dict written elsewhere."""
    from leakexp.models import MODEL_LABEL

    labels = set(MODEL_LABEL.values()) | {"DUET"}
    elsewhere = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.parent.name == "models":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict) and any(isinstance(v, ast.Constant) and v.value in labels for v in node.values):
                elsewhere.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert elsewhere == []
    assert MODEL_LABEL == {"monot5": "monoT5", "monobert": "monoBERT", "knrm": "KNRM", "duet": "Duet", "pacrr": "PACRR"}


STAGE_MODULE_LINES = 320  # "about 300": a stage module declares its stages and calls library code
# the robustness family declares six stages (two shared inputs, four parts per cell) and their schema in one module


def test_stage_modules_are_thin_declarations():
    """What a stage reads, its inputs and a compute that calls library code: the computations live in lib/, the
    formats in toolkit/, the captions in tables/, so no stage module grows into its domain's library again."""
    long = {path.name: n for path in sorted((ROOT / "stages").rglob("*.py"))
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > STAGE_MODULE_LINES}
    assert long == {}


# where raw configuration values may be read: the runner's composition and resolution, the composition root that checks
# every section and makes the typed settings, and leakexp-run's naming of its job before any check
RAW_CONFIG_READERS = {"runner/config.py", "runner/registry.py", "cli/app.py"}
# where Hydra's composition (a DictConfig) may be met at all: those, `leakexp measure`, which composes the evaluate
# section alone (so it starts without the stages and torch), and Hydra's launchers, which Hydra hands its own
COMPOSITION = {*RAW_CONFIG_READERS, "cli/measure.py", "hydra_plugins/leakexp_launcher/gpu_local.py",
               "hydra_plugins/leakexp_launcher/slurm.py"}
COMPOSERS = {"compose_raw", "resolved_values", "typed", "OmegaConf", "DictConfig"}
RESOLVERS = {"resolved_model_config", "resolved_corpus_config", "corpus_names"}
CONFIG_KEYS = {*sections(), *RunSettings.model_fields, "experiment", "get"}


def _raw_config_reads(tree: ast.AST) -> list[str]:
    """``cfg.<section or top-level value>`` (also inside ``OmegaConf.to_container(cfg.x)``), ``cfg.get(...)`` and the
    resolvers of raw values (``resolved_*_config``, ``corpus_names``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "cfg" \
                and node.attr in CONFIG_KEYS:
            found.append(f"line {node.lineno}: cfg.{node.attr}")
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in RESOLVERS:
                found.append(f"line {node.lineno}: {name}(...)")
    return sorted(found, key=lambda line: int(line.split()[1].rstrip(":")))


def test_settings_are_read_through_the_typed_settings():
    """One channel: code reads a setting from a configuration's typed ``Settings`` (``runner.settings``,
    ``cfg``, a stage's ``ctx.settings``), never from the raw DictConfig."""
    bad = {}
    for path in sorted([*ROOT.rglob("*.py"), *(ROOT.parent / "hydra_plugins").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.relative_to(ROOT.parent).as_posix()
        if rel in RAW_CONFIG_READERS:
            continue
        reads = _raw_config_reads(ast.parse(path.read_text()))
        if reads:
            bad[rel] = reads
    assert not bad, f"raw configuration reads outside {sorted(RAW_CONFIG_READERS)}: {bad}"


def test_the_raw_read_check_sees_what_it_forbids():
    tree = ast.parse("def f(cfg):\n    a = cfg.evaluate.mfr\n    b = resolved_model_config(cfg, 'knrm')\n"
                     "    c = s.evaluate.mfr\n    d = cfg.get('workers')\n    e = cfg.lr\n")
    assert _raw_config_reads(tree) == ["line 2: cfg.evaluate", "line 3: resolved_model_config(...)", "line 5: cfg.get"]


def _uses(tree: ast.AST, names: set[str]) -> list[str]:
    """Where a module names one of ``names`` (a call, an attribute, an import) or imports omegaconf."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names:
            found.append(f"line {node.lineno}: {node.id}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("omegaconf"):
            found.append(f"line {node.lineno}: from {node.module}")
        elif isinstance(node, ast.ImportFrom):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name in names]
    return found


def test_nothing_past_composition_reads_the_composed_configuration():
    """One shape after composition: ``leakexp.runner.registry.compose`` turns Hydra's composition into the typed
    ``Settings``, and no module outside the composition (and Hydra's own entry points) meets a DictConfig, composes,
    or resolves raw values."""
    bad = {}
    for path in sorted([*ROOT.rglob("*.py"), *(ROOT.parent / "hydra_plugins").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.relative_to(ROOT.parent).as_posix()
        if rel not in COMPOSITION and (found := _uses(ast.parse(path.read_text()), COMPOSERS)):
            bad[rel] = found
    assert bad == {}
    assert _uses(ast.parse("from omegaconf import DictConfig\ns = typed(cfg)\nt = compose(o)\n"), COMPOSERS) == \
        ["line 1: from omegaconf", "line 2: typed"]


def test_stages_are_registered_where_they_are_declared_in_one_registry():
    """Every stage class of the stage package is registered by its declaration (``@register_stage``) in the runner's
    one registry, whose order follows the package's PIPELINE; no module keeps a list of stages of its own."""
    import importlib
    import inspect

    from leakexp.runner.stage import Stage

    registered = {type(s) for s in STAGES}
    declared = set()
    for path in sorted((ROOT / "stages").rglob("*.py")):
        module = importlib.import_module(".".join(("leakexp", *path.relative_to(ROOT).with_suffix("").parts))
                                         .removesuffix(".__init__"))
        declared |= {c for _, c in inspect.getmembers(module, inspect.isclass)
                     if issubclass(c, Stage) and c.__module__ == module.__name__ and c.name}
    assert declared == registered and len(registered) > 25
    lists = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            if targets and isinstance(node.value, (ast.Tuple, ast.List)) and node.value.elts and \
                    all(isinstance(e, (ast.Attribute, ast.Name, ast.Starred)) for e in node.value.elts) and \
                    any("STAGE" in t.upper() for t in targets):  # a tuple of stage declarations (STAGES = (...))
                lists.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert lists == []


def test_no_stage_module_names_a_model():
    """A model's special needs (monoT5's embedded vocabulary) are declared by its class (``Reranker.artifacts``):
    no stage module compares with a model's name, spells one, or imports a model's own module."""
    from leakexp.models import REGISTRY

    modules = {f"leakexp.models.{cls.__module__.rsplit('.', 1)[1]}" for cls in REGISTRY.values()}
    bad = []
    for path in sorted((ROOT / "stages").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in REGISTRY:
                bad.append(f"{path.name}:{node.lineno}: {node.value!r}")
            if isinstance(node, ast.ImportFrom) and node.module in modules:
                bad.append(f"{path.name}:{node.lineno}: from {node.module}")
    assert bad == []
    assert {"leakexp.models.monot5", "leakexp.models.knrm"} <= modules


def test_a_data_source_is_asked_not_branched_on():
    """What differs between the toy world, ir_datasets and local files is asked of the source's object
    (``leakexp.data.sources``): no other module compares a kind of data with its name."""
    kinds = {"toy", "irds", "local"}
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == ROOT / "data" / "sources.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value in kinds
                                                     for c in [node.left, *node.comparators]):
                bad.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert bad == []


# the libraries that compute: a module imports them inside the functions that compute, so the commands that compute
# nothing (--help, status, plan, stages, tables, measure) start without them (tests/test_light_commands.py)
HEAVY = ("torch", "transformers", "sentence_transformers", "faiss", "pyterrier", "scipy", "networkx", "matplotlib",
         "sklearn", "pandas")
# torch's optimisers subclass torch.optim.Optimizer; only the trainer imports them, inside make_optimizer
HEAVY_AT_TOP = {"lib/adafactor.py", "lib/bert_adam.py"}


def _top_level_imports(tree: ast.Module) -> list[ast.stmt]:
    return [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_heavy_libraries_are_imported_where_used():
    """No module imports a library that computes (torch, transformers, SBERT, Faiss, PyTerrier, SciPy, networkx,
    matplotlib, pandas) at its top, where importing the stage registry, the models' declarations or the command line would
    load it; annotations name them under ``TYPE_CHECKING``."""
    bad, light = [], {f"leakexp.{p.removesuffix('.py').replace('/', '.')}" for p in HEAVY_AT_TOP}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in _top_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if rel not in HEAVY_AT_TOP and any(n.split(".")[0] in HEAVY for n in names):
                bad.append(f"{rel}:{node.lineno}")
            if any(n in light for n in names) or (isinstance(node, ast.ImportFrom) and node.module in light):
                bad.append(f"{rel}:{node.lineno}")
    assert bad == []


def _type_checking_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for n in ast.walk(node):
                if isinstance(n, (ast.Import, ast.ImportFrom)):
                    names.update(a.asname or a.name.split(".")[0] for a in n.names)
    return names


class _RuntimeUses(ast.NodeVisitor):
    """Where a name imported only for annotations is evaluated outside a function that imports it: class bodies,
    default values, decorators, lambdas at the top (annotations are strings: ``from __future__ import annotations``)."""

    def __init__(self, names: set[str]):
        self.names, self.scopes, self.found = names, [], []

    def visit_FunctionDef(self, node):
        for expr in [*node.args.defaults, *node.args.kw_defaults, *node.decorator_list]:
            if expr is not None:
                self.visit(expr)  # evaluated where the function is defined
        self.scopes.append({a.asname or a.name.split(".")[0] for n in ast.walk(node)
                            if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names})
        for statement in node.body:
            self.visit(statement)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self.visit(node.value)

    def visit_arg(self, node):
        pass

    def visit_Name(self, node):
        if node.id in self.names and isinstance(node.ctx, ast.Load) and not any(node.id in s for s in self.scopes):
            self.found.append(node.lineno)


def _runtime_uses_of_annotation_imports(source: str) -> list[int]:
    tree = ast.parse(source)
    names = _type_checking_names(tree)
    if not names:
        return []
    visitor = _RuntimeUses(names)
    for node in tree.body:
        if not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)):
            visitor.visit(node)
    return visitor.found


def test_names_imported_for_annotations_only_are_never_evaluated():
    """A library imported under ``TYPE_CHECKING`` (so light commands start without it) is a NameError wherever code
    evaluates it without importing it: a dataclass field's default factory did, and only a slow test ran it."""
    bad = [f"{path.relative_to(ROOT).as_posix()}:{line}" for path in sorted(ROOT.rglob("*.py"))
           for line in _runtime_uses_of_annotation_imports(path.read_text(encoding="utf-8"))]
    assert bad == []


def test_the_annotation_import_check_sees_what_it_forbids():
    source = ("from __future__ import annotations\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
              "    import pandas as pd\n\n\nclass Side:\n    qrels: pd.DataFrame = field(default_factory=lambda: "
              "pd.DataFrame())\n\n\ndef fine(x: pd.DataFrame) -> pd.DataFrame:\n    import pandas as pd\n\n"
              "    return pd.concat([x])\n\n\ndef late(x=pd.NA):\n    return x\n")
    assert _runtime_uses_of_annotation_imports(source) == [8, 17]
