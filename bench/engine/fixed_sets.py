"""The training module's fixed sets: the group each method's credit is shown on (the credit map,
:mod:`bench.engine.credit_map`) and the failed completions blame alignment is measured on (the blame
probe, :mod:`bench.engine.blame`), each fixed once and measured under the current policy.

A mixin of :class:`bench.engine.module.RLVRModule`: it reads the module's policies, method, sampler
and settings and logs through its ``_log``."""

from __future__ import annotations

import time
from typing import Any

from bench.engine.blame import blame_alignment, find_blame_probe
from bench.engine.credit_map import find_group, moved_to
from bench.engine.metrics import metric_key


class FixedSets:
    """The credit-map group and the blame probe of :class:`bench.engine.module.RLVRModule`."""

    def make_fixed_sets(self, rows: list[dict], seed: int = 1234) -> bool:
        """Fix the group to show each method's credit on (:func:`bench.engine.credit_map.find_group`), on the
        trainer's device (Lightning's ``validate`` leaves the module on the CPU). Returns whether one was found."""
        device = self._trainer.strategy.root_device if self._trainer is not None and self.shard_plan is None else None
        with moved_to(device, self.policy, self.ref_policy), self._whole(self.policy, self.ref_policy):
            found = find_group(self.sampler, rows, self.rl, self._rng_devices(), seed)
            if found is not None:
                self._credit_group = found
            self.make_blame_probe(rows)
        return found is not None

    def make_blame_probe(self, rows: list[dict]) -> bool:
        """Fix the failed completions that blame alignment is measured on (see
        :func:`bench.engine.blame.find_blame_probe`), and measure it on the policy of the last eval
        point when that is the current one (the base policy: the run evaluates before it makes the
        probe). Returns whether one was found (none when the task cannot tell where answers go wrong)."""
        self._blame_probe = find_blame_probe(self.sampler, rows, self.rl, self._rng_devices())
        if self._blame_probe is not None and self.eval_history and self.eval_history[-1]["step"] == self.rl_step:
            self._log_blame(self.eval_history[-1])
        return self._blame_probe is not None

    def blame(self) -> dict[str, float]:
        """The method's blame alignment on the blame probe under the current policy ({} without a probe)."""
        if self._blame_probe is None:
            return {}
        args = self.policy, self.ref_policy, self.method, self.sampler, self.rl, self._blame_probe
        with self._whole(self.policy, self.ref_policy):
            return blame_alignment(*args, self._rng_devices())

    def _log_blame(self, entry: dict[str, Any]) -> None:
        t = time.perf_counter()
        entry["blame"] = self.blame()
        self._log(
            {metric_key("blame", k): v for k, v in entry["blame"].items()} | {"time/blame_s": time.perf_counter() - t}
        )
