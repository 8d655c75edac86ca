"""A written run config reads back as itself through the parser a sweep worker uses, whatever the
characters of its strings: a config hash like ``45644754158945e8`` once came back as a float and
failed its run (about one run in 800)."""

import random

import pytest

from bench.config import MethodSpec, RunConfig, TrackingConfig
from bench.run.args import config_yaml, train_parser


def read_back(text: str, tmp_path) -> RunConfig:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    p = train_parser()
    ns = p.parse_args(["--config", str(path), "--no-progress"])
    ns.pop("no_progress")
    ns.pop("config", None)
    cfg = p.instantiate(ns)
    return RunConfig(**{k: v for k, v in vars(cfg).items() if k in RunConfig.__dataclass_fields__})


CRAFTED = [
    "45644754158945e8",  # the hash that failed: a float to jsonargparse's reader
    "1234567890123456",  # all digits
    "0899123456789abc",  # a leading zero
    "1e5",
    "1_000",
    "0x1f",
    "0o17",
    "+12",
    "-3.5",
    ".5",
    ".inf",
    "-.inf",
    ".nan",
    "1:20",
    "true",
    "False",
    "yes",
    "no",
    "on",
    "null",
    "~",
    "",
    " ",
    "a: b",
    "#x",
    "'q'",
    '"d"',
    "[1]",
    "{}",
]


def random_strings(n: int, rng: random.Random) -> list[str]:
    alphabets = ("0123456789abcdef", "0123456789eE.+-_", "0123456789", "abc:-# '\"e.0x")
    return [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 16)))
        for alphabet in (rng.choice(alphabets) for _ in range(n))
    ]


@pytest.mark.parametrize("chunk", range(4))
def test_every_written_value_reads_back_as_itself(tmp_path, chunk):
    rng = random.Random(chunk)
    values = CRAFTED + random_strings(400, rng)
    tags = {f"t{i}": v for i, v in enumerate(values)}
    # method options are typed by the method's Config (checked there): numbers, flags and names
    options = {"lam": 0.95, "n": 3, "eps": 1e-4, "flag": True, "none": None, "mode": "diff_credit", "k": [1, 4]}
    cfg = RunConfig(
        method=MethodSpec(options=options),
        tracking=TrackingConfig(run_name=values[chunk], sweep=values[-1 - chunk], tags=tags),
    )
    back = read_back(config_yaml(cfg), tmp_path)
    assert back.tracking.tags == tags
    assert back.method.options == options
    assert (back.tracking.run_name, back.tracking.sweep) == (values[chunk], values[-1 - chunk])
    assert config_yaml(back) == config_yaml(cfg)
