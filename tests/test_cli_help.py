"""``leakexp --help`` lists every command once, in its group (pipeline, toolkit, inspection)."""

from __future__ import annotations

import re

from leakexp.cli.main import command_groups, main, stage_commands


def test_every_command_is_listed_once_in_one_group(capsys):
    try:
        main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.split("commands (")[1].splitlines()[1:]
              if line.startswith("  ") and not line.startswith("   ")]
    try:
        main(["nope"])
    except SystemExit:
        pass
    choices = re.findall(r"'([\w-]+)'", capsys.readouterr().err.split("choose from")[1])
    assert sorted(listed) == sorted(choices) and len(listed) == len(set(listed)) == 29
    grouped = [name for names in command_groups(stage_commands()).values() for name in names]
    assert listed == grouped  # in the groups' order, each once
    for group in ("pipeline", "toolkit", "inspection"):
        assert re.search(rf"^{group} \(", out, re.M), group
    assert "positional arguments" not in out  # argparse's flat list would repeat them
