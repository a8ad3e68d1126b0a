"""Robustness of the trained re-rankers, with and without leakage (Wu et al., "Are Neural Ranking Models Robust?",
ACM TOIS 2022), and whether leakage makes a model more brittle: the ``robustness/*`` stages, one family whose command
is ``leakexp robustness`` and whose section is ``robustness``.

- ``family.py``: what every robustness stage shares: the ``robustness`` settings and their checks, which grid cells
  get robustness parts and each cell's parts;
- ``perturbations.py``: the shared inputs, a corpus's queries under a seeded attack and its documents under a seeded
  manipulation (``robustness/attacked-queries``, ``robustness/manipulated-docs``);
- ``parts.py``: the four parts of a cell (``robustness/own-corpus``, ``robustness/ood``, ``robustness/query-attack``,
  ``robustness/doc-manipulation``).

What they compute is library code: the measures in ``leakexp.lib.robustness_stats``, the attacks and manipulations in
``leakexp.toolkit.attacks``; the tables and the figure are ``leakexp.tables.robustness``'.
"""
