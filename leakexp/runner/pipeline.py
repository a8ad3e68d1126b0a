"""The runner: resolves the stages an artifact needs, keys each by what it reads, and computes what is missing.

It names no stage. A key is the hash of a record: the stage's name and version, its normalised parameters,
the config values it declared (``Stage.reads``), the identity of outside files it reads, and the keys of its
inputs. So a changed value re-keys the stages that read it and everything below them, nothing else; equal
records are one artifact. Keys are computed once per process and need no data: status is cheap.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from leakexp.runner.jobs import compute_threads
from leakexp.runner.schema import Settings
from leakexp.runner.stage import Ask, Config, Context, InputsMissing, Runtime, Stage, select
from leakexp.runner.store import KEY_LENGTH, Store, config_hash

RUNNER = 2  # the key scheme; markers of other schemes are another layout (see ``Runner.state``)


class Runner:
    """Keys, paths, states and values of the artifacts of one configuration: ``settings`` (its typed
    :class:`~leakexp.runner.schema.Settings`), whose plain ``values`` are what keys hash."""

    def __init__(self, settings: Settings | Mapping, stages: Iterable[Stage], store: Store, *,
                 runtime: Runtime | None = None, cuda: bool = False):
        known = isinstance(settings, Settings)  # or plain values, untyped (the runner's own tests)
        self.settings, self.values = (settings, settings.values) if known else (None, settings)  # keys hash values
        self.store, self.cuda, self.runtime, self.stages = store, cuda, runtime or Runtime(), {s.name: s for s in stages}
        self._got, self._ensured = {}, set()  # what ``get`` returned, what ``ensure`` checked (Ask, computed)
        # per ask, made once (status and plan key every artifact of the grid); _missing: see ``unavailable``
        self._normals, self._configs, self._inputs, self._records, self._keys, self._upstream, self._missing = \
            {}, {}, {}, {}, {}, {}, {}
        self._folders = {s.name: store.folder(s.name, renamed_from=s.key_name) for s in self.stages.values()}

    def stage(self, ask: Ask) -> Stage:
        try:
            return self.stages[ask.stage]
        except KeyError:
            raise ValueError(f"no stage named {ask.stage!r}; stages: {', '.join(self.stages)}") from None

    def _once(self, memo: dict, ask: Ask, make: Callable[[], Any]) -> Any:
        return memo[ask] if ask in memo else memo.setdefault(ask, make())

    def normal(self, ask: Ask) -> Ask:
        return self._once(self._normals, ask, lambda: Ask.of(ask.stage, **self.stage(ask).normalise(ask.params)))

    def config(self, ask: Ask) -> Config:
        """The config values the stage of ``ask`` reads (shared: its computation gets a copy in its context)."""
        ask = self.normal(ask)
        return self._once(self._configs, ask,
                          lambda: select(self.values, self.stage(ask).read_paths(ask.params, self.cuda),
                                         self.settings.section if self.settings is not None else None))

    def inputs(self, ask: Ask) -> dict[str, Ask | list[Ask]]:
        ask = self.normal(ask)
        made = self._once(self._inputs, ask, lambda: dict(self.stage(ask).inputs(ask.params, self.config(ask))))
        return {n: list(v) if isinstance(v, list) else v for n, v in made.items()}

    def record(self, ask: Ask) -> dict:
        """Everything the key of ``ask`` is made of (its marker's ``config``)."""
        ask = self.normal(ask)
        if ask not in self._records:
            stage, config = self.stage(ask), self.config(ask)
            keys = {n: [self.key(a) for a in v] if isinstance(v, list) else self.key(v)
                    for n, v in self.inputs(ask).items()}
            record = {"runner": RUNNER, "stage": stage.key_name, "version": stage.version, "params": ask.params,
                      "config": config, "inputs": keys}
            if stage.external is not None:
                record["external"] = stage.external(ask.params, config)
            if stage.device:
                record["cuda"] = self.cuda
            self._records[ask] = json.loads(json.dumps(record, sort_keys=True, default=str))
        return self._records[ask]

    def key(self, ask: Ask) -> str:
        ask = self.normal(ask)
        return self._once(self._keys, ask, lambda: config_hash(self.record(ask)))

    def path(self, ask: Ask) -> Path | None:
        """The artifact's directory (None for in-process values); computes nothing."""
        ask, stage = self.normal(ask), self.stage(ask)
        if not stage.stored:  # an in-process value
            return None
        parts = stage.path(ask.params, self.config(ask)) if stage.path else ask.params.values()
        return self.store.path(self._folders[stage.name], *parts, self.key(ask)[:KEY_LENGTH])

    def direct(self, ask: Ask) -> list[Ask]:
        return [b for v in self.inputs(ask).values() for b in (v if isinstance(v, list) else [v])]

    def stored_inputs(self, ask: Ask) -> list[str]:
        """Keys of the stored artifacts ``ask`` reads, through in-process inputs (its marker's ``upstream``)."""
        return sorted({k for b in self.direct(ask) for k in ([self.key(b)] if self.stage(b).stored
                                                              else self.stored_inputs(b))})

    def upstream(self, ask: Ask) -> list[Ask]:
        """``ask`` and every artifact it needs, each once, inputs first."""
        seen: dict[Ask, None] = {}

        def visit(a: Ask) -> None:
            a = self.normal(a)
            if a in seen:
                return
            for b in self.direct(a):
                visit(b)
            seen[a] = None

        ask = self.normal(ask)
        return self._once(self._upstream, ask, lambda: visit(ask) or list(seen))

    def unavailable(self, ask: Ask) -> list[str]:
        """Outside files ``ask`` or anything upstream reads that are absent (``Stage.missing``), one line each;
        memoised per artifact, so status asks each stage's hook once."""
        ask = self.normal(ask)
        if ask not in self._missing:
            hook = self.stage(ask).missing
            found = [hook(ask.params, self.config(ask))] if hook else []
            found += [m for b in self.direct(ask) for m in self.unavailable(b)]
            self._missing[ask] = list(dict.fromkeys(m for m in found if m))
        return self._missing[ask]

    def context(self, ask: Ask) -> Context:
        ask = self.normal(ask)
        inputs = self.inputs(ask)

        def resolve(name: str) -> Any:
            v = inputs[name]
            return [self.get(a) for a in v] if isinstance(v, list) else self.get(v)

        return Context(self.stage(ask), ask.params, copy.deepcopy(self.config(ask)), self.key(ask), self.path(ask),
                       self.runtime, tuple(inputs), resolve)

    def ensure(self, ask: Ask, *, load: bool = False) -> Path:
        """The stored artifact of ``ask``, computing it and whatever it lacks upstream. Every stored artifact
        upstream is checked first, by its marker and file sizes (a damaged one is recomputed, and a failure is
        recorded where it happens, not in each dependant), once per runner; ``load``: ``ask`` is about to be read,
        so a stage that asks for it (checkpoints) also has its files' checksums checked."""
        ask = self.normal(ask)
        if gone := self.unavailable(ask):  # nothing is keyed or computed on absent data (its loader refuses too)
            raise InputsMissing("; ".join(gone))
        for up in self.upstream(ask):
            deep = load and up == ask and self.stage(up).verify
            if self.stage(up).stored and (up, deep) not in self._ensured and (up, True) not in self._ensured:
                with compute_threads(self.cuda, self.runtime):  # bytes whatever the machine
                    self.store.ensure(self.path(up), self.record(up), checksums=deep, upstream=self.stored_inputs(up),
                                      compute=lambda tmp, up=up: self.stage(up).compute(self.context(up), tmp))
                self._ensured.add((up, deep))
        return self.path(ask)

    def get(self, ask: Ask) -> Any:
        """What a dependant receives: the in-process value, or the stored artifact (opened), memoised."""
        ask, stage = self.normal(ask), self.stage(ask)
        memo = f"{ask.stage}:{self.key(ask)}"
        if memo not in self._got:
            if stage.stored:
                path = self.ensure(ask, load=True)
                self._got[memo] = stage.opener(path) if stage.opener else path
            else:
                self._got[memo] = stage.value(self.context(ask))
        return self._got[memo]

    def state(self, ask: Ask, *, checksums: bool = False) -> tuple[str, Path | None, str]:
        """(state, path, detail), computing nothing: data missing (outside files it reads), done, damaged (files differ
        from the marker, or it is unreadable), running, failed, stale (only other configurations'), or missing."""
        try:
            path = self.path(ask)
        except Exception as exc:  # e.g. a file the config names is missing: nothing of it can exist
            return "missing", None, f"{type(exc).__name__}: {exc}".splitlines()[0]
        if gone := self.unavailable(ask):  # whatever the store holds, it is not of the data named by the key
            return "data missing", path, "; ".join(gone)
        store = self.store
        if (path / "DONE.json").exists():
            marker = store.marker(path)
            if marker is None:
                return "damaged", path, "DONE.json is unreadable"
            bad = store.damaged_files(path, marker, checksums=checksums)
            return ("damaged", path, ", ".join(bad)) if bad else ("done", path, "")
        if store.is_locked(path):
            return "running", path, store.holder(path)
        failure = store.failure_path(path)
        if failure.exists():
            try:
                return "failed", path, json.loads(failure.read_text()).get("error", "")
            except (OSError, ValueError, AttributeError):
                return "failed", path, "(unreadable failure record)"
        others = store.others(path)
        if others:
            older = sum(1 for o in others if ((store.marker(o) or 0) and (store.marker(o).config or {})
                                              .get("runner")) != RUNNER)
            detail = f"{len(others)} artifact(s) of other configurations"
            if older:
                detail += (f", {older} of an earlier store layout (kept, not reused: their keys were made "
                           "another way; delete them once the new ones are computed)")
            return "stale", path, detail
        return "missing", path, ""

