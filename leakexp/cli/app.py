"""``leakexp-run``: one grid cell per Hydra job, for multiruns and cluster launchers.

    leakexp-run -m experiment=paper                                # the paper's grid (make grid)
    leakexp-run -m experiment=paper model=knrm,duet seed=1,2       # a partial grid
    leakexp-run -m experiment=paper hydra/launcher=submitit_slurm  # on a SLURM cluster
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from leakexp.runner.config import conf_dir, validate
from leakexp.runner.loop import each
from leakexp.stages import robustness
from leakexp.stages.cell import Cell, cell_from_config
from leakexp.stages.grid import run_cell
from leakexp.stages.registry import runner

log = logging.getLogger("leakexp")


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> dict | None:
    validate(cfg)

    def work(cell: Cell) -> dict:
        r = runner(cfg)
        means = run_cell(cfg, r, cell)
        if cfg.robustness.get("enabled", False) and cell in robustness.robustness_cells(cfg):
            robustness.robust(cfg, r, cell)
        return means

    # one cell per job: the failure is recorded next to the artifact and the other jobs go on
    results = []
    each([cell_from_config(cfg)], work, desc="cell", progress=False,
         done=lambda cell, means: (results.append(means), log.info("cell %s: %s", cell, means)))
    return results[0] if results else None


if __name__ == "__main__":
    main()
