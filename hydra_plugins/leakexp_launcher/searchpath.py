"""The user's configuration directories on Hydra's search path, ahead of leakexp's conf/: ``$LEAKEXP_CONF`` and
``~/.config/leakexp/conf`` (:func:`leakexp.runner.config.user_conf_dirs`), so ``leakexp-run`` and every ``leakexp``
command find a user's ``corpus/mycorpus.yaml`` as one of leakexp's own, and a user's file of a name leakexp ships
replaces leakexp's. Hydra's ``hydra.searchpath`` appends after the primary directory, where a file could add an
option but replace none; a search path plugin may put them first."""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from leakexp.runner.config import user_conf_dirs


class UserConf(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for path in reversed(user_conf_dirs()):
            search_path.prepend(provider="leakexp-user", path=f"file://{path}")
