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
from leakexp.stages.cell import cell_from_config
from leakexp.stages.grid import run_cell
from leakexp.stages.registry import runner

log = logging.getLogger("leakexp")


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> dict | None:
    validate(cfg)
    cell = cell_from_config(cfg)
    try:
        r = runner(cfg)
        means = run_cell(cfg, r, cell)
        if cfg.robustness.get("enabled", False):
            from leakexp.stages import robustness

            if cell in robustness.robustness_cells(cfg):
                robustness.robust(cfg, r, cell)
    except Exception as exc:  # the failure is recorded next to the artifact; the other jobs go on
        log.error("cell %s failed: %s: %s", cell, type(exc).__name__, exc)
        return None
    log.info("cell %s: %s", cell, means)
    return means


if __name__ == "__main__":
    main()
