"""The small sweep the sweep and UI tests run."""

# A small sweep on an easy arithmetic task: a short warm-start (cached with the test's store) leaves a
# base policy that is right sometimes, so groups are mixed and the methods really learn.
SPEC = {
    "name": "tiny",
    "tasks": [{"name": "arithmetic", "options": {"num_operands": 2, "high": 30, "train_size": 3000, "eval_size": 50}}],
    "methods": ["grpo", "gspo"],
    "models": ["tiny-500k"],
    "seeds": [0, 1],
    "budget": {"samples": 160},
    "eval": {"every": 2, "n": 2, "k": [1, 2], "num_problems": 12, "batch_problems": 12},
    "overrides": {
        "rl.prompts_per_step": 4,
        "rl.group_size": 8,
        "rl.lr": 1.0e-3,
        "rl.sampling.max_new_tokens": 20,
        "eval.sampling.max_new_tokens": 20,
        "warmstart.max_steps": 60,
        "warmstart.check_every": 30,
        "warmstart.batch_size": 32,
        "warmstart.target_accuracy": 0.2,
    },
    "threads": 1,
}
