"""The key records of every artifact of ``experiment=demo`` (``Runner.record``: what each key is made of), for
``tests/test_key_records.py``, which checks that the current code keys every stored artifact as the file says.

Regenerate the file after a deliberate change of a key (a stage's version bump, a new setting it reads, a new
artifact of the demo), and review its diff: every record that changed is an artifact a store recomputes::

    PYTHONPATH=. python tests/key_records.py --write

Without ``--write`` it prints how many records differ from the file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

from leakexp.runner.registry import compose
from leakexp.runner.stage import Ask
from leakexp.runner.store import config_hash
from leakexp.stages.cell import grid_cells
from leakexp.grid.work import demo_asks as extras, grid_asks
from leakexp.runner.registry import runner

# the demo on any machine: a stage that records its device would otherwise key a GPU machine's artifacts apart
OVERRIDES = ["experiment=demo", "device=cpu"]
DATA = Path(__file__).resolve().parent / "data" / "demo_key_records.json.gz"


def demo_runner(store: Path):
    """The read-only runner of the demo on an empty ``store`` (keys need no data)."""
    cfg = compose([*OVERRIDES, f"store={store}"])
    return cfg, runner(cfg, readonly=True)


def demo_asks(cfg, r) -> list[Ask]:
    """Every artifact `leakexp demo` asks for, and everything upstream of them, each once (normalised)."""
    asks = [a for v in grid_asks(cfg, r).values() for a in v] + extras(cfg, r)  # and what `leakexp demo` adds
    return list(dict.fromkeys(b for a in asks for b in r.upstream(a)))


def records(store: Path) -> dict[str, dict]:
    """key -> record of every artifact of the demo, in key order."""
    cfg, r = demo_runner(store)
    out = {r.key(a): r.record(a) for a in demo_asks(cfg, r)}
    return dict(sorted(out.items()))


def load(path: Path = DATA) -> dict[str, dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def write(found: dict[str, dict], path: Path = DATA) -> None:
    """Compact, sorted JSON, gzip without a timestamp: the same records give the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(found, sort_keys=True, separators=(",", ":"))
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", filename="", mtime=0) as f:
        f.write(text.encode("utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"write {DATA.name}")
    parser.add_argument("--out", type=Path, default=DATA, help="the file to write or compare with")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as store:
        found = records(Path(store))
    assert all(config_hash(rec) == key for key, rec in found.items())
    if args.write:
        write(found, args.out)
        print(f"{len(found)} records -> {args.out}")
        return 0
    stored = load(args.out)
    differ = sorted(set(found) ^ set(stored))
    print(f"{len(found)} records; {len(stored)} stored; {len(differ)} keys in only one of them")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
