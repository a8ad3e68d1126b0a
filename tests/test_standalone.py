"""The repository stands alone: it names no file outside itself, and every repository path it names exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[1]
TEXT = (".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".txt", ".sh")
# names of material a user of the repository does not have
OUTSIDE = re.compile(r"\.\./shared|\bseeds?/|\bseed 00\d\b|\b(MODELS|DESIGN|ECOSYSTEM|STYLE)\.md\b")
TOP = ("leakexp", "conf", "docs", "tests", "experiments", "benchmarks", "hydra_plugins", ".ci")
PATH = re.compile(r"(?<![\w/.@~-])((?:%s)/[\w./-]*(?:\.(?:py|md|yaml|csv|gz|json|jsonl|txt|tsv|sh|toml)\b|/))"
                  % "|".join(re.escape(t) for t in TOP))
# a path in a line that names another project (this line or the one before) is that project's: "castorini/anserini
# @ anserini-0.22.1, docs/regressions/regressions-disk45.md"
ELSEWHERE = re.compile(r"(?i)\b(anserini|pygaggle|capreolus|spire-22|dl4marco|mesh|google-research|magnitude|"
                       r"extrapolate-eval|pyserini|trec_eval)\b")


def _files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / n for n in names if (n.endswith(TEXT) or Path(n).name in ("Makefile", "run"))
            and not n.startswith("tests/data/") and (ROOT / n).is_file()]


def test_no_file_names_material_outside_the_repository():
    found = []
    for f in _files():
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line) and f.name != Path(__file__).name:
                found.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert found == [], "\n".join(found)


def test_every_repository_path_named_exists():
    missing = []
    for f in _files():
        lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        for n, line in enumerate(lines, 1):
            if ELSEWHERE.search(line) or (n > 1 and ELSEWHERE.search(lines[n - 2])):
                continue
            for m in PATH.finditer(line):
                path = m.group(1).rstrip(".")
                if not (ROOT / path).exists():
                    missing.append(f"{f.relative_to(ROOT)}:{n}: {path}")
    assert missing == [], "\n".join(missing)
