"""RL options a benchmark's measured runs take from its command line (``--set rl.KEY=VALUE``): the same run
measured with and without the options that move the bits (``rl.old_logprobs``, ``rl.packed_update``)."""

from __future__ import annotations

import dataclasses

import yaml

from bench.errors import CreditBenchError
from bench.options import build_config


def with_rl_settings(cfg, settings: list[str] | tuple[str, ...]):
    """``cfg`` (a RunConfig) with the RL options ``settings`` (``rl.KEY=VALUE``, the value read as YAML)."""
    options = {}
    for s in settings:
        key, _, value = s.partition("=")
        names = {f.name for f in dataclasses.fields(cfg.rl)}
        if not key.startswith("rl.") or not value or key[3:] not in names:
            raise CreditBenchError(
                f"--set takes rl.KEY=VALUE with KEY an RL option ({', '.join(sorted(names))}), got {s!r}"
            )
        options[key[3:]] = yaml.safe_load(value)
    if not options:
        return cfg
    checked = build_config(type(cfg.rl), options, "--set")  # each value of its option's type and choices
    return dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, **{k: getattr(checked, k) for k in options}))
