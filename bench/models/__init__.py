"""Models: the tiny Qwen3 family and its character tokenizer (policy.py, with loading, saving, LoRA
and activation checkpointing of any policy), the registered pretrained models and their fetch
(pretrained.py), and the Hub architectures a memory plan builds without weights (hub_archs.py)."""
