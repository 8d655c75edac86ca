"""The training module's evaluation (Lightning's validation loop): each eval task's rollouts at
the eval sampling, the exact reference probabilities, a stored base eval reused, and the eval point
recorded and logged -- metrics, completions, the per-problem table, blame alignment.

A mixin of :class:`bench.engine.module.RLVRModule`: it reads the module's state (policy, sampler,
eval tasks and settings, counters) and logs through its ``_log`` and ``_out``."""

from __future__ import annotations

import dataclasses
from typing import Any

from lightning.pytorch.loggers import MLFlowLogger

from bench.engine.exact import eval_reference_probs
from bench.engine.metrics import metric_key, per_problem_table


class Evaluation:
    """Lightning's validation hooks for :class:`bench.engine.module.RLVRModule`."""

    def on_validation_epoch_start(self) -> None:
        self._eval_block = self._whole(self.policy)  # FSDP: processes may have different numbers of eval batches
        self._eval_block.__enter__()
        self.evals.start()
        self._reused = self.base_eval.lookup(self) if self.base_eval is not None else None  # the stored base eval

    def validation_step(self, rows: list[dict], batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._reused is not None:
            return
        name = list(self.eval_tasks)[dataloader_idx]
        task, sampling = self.eval_tasks[name], self.eval_cfg.sampling
        batch, info = self.sampler.rollout(rows, self.eval_cfg.n, sampling, details=True, task=task)
        ref_probs = eval_reference_probs(self.policy, task, rows, self.tokenizer, temperature=sampling.temperature)
        self.evals.add(name, rows, batch, info, ref_probs=ref_probs)
        if self.eval_cfg.greedy:
            greedy = dataclasses.replace(self.eval_cfg.sampling, temperature=0.0)
            self.evals.add_greedy(
                name, self.sampler.rollout(rows, 1, greedy, details=False, task=self.eval_tasks[name])[0]
            )

    def on_validation_epoch_end(self) -> None:
        entry: dict[str, Any] = {"step": self.rl_step, "samples": self.samples, "tokens": self.tokens, "eval": {}}
        entry.update(eval_n=self.eval_cfg.n, per_problem={}, problem_ids={})
        mlflow = isinstance(self.logger, MLFlowLogger)
        results = self._reused if self._reused is not None else self.evals.results()  # every process's, gathered
        if self.base_eval is not None:
            self.base_eval.store(results)
        for name, res in results.items():
            metrics = {metric_key("eval", name, k): v for k, v in res.summary.items()}
            metrics[metric_key("eval", name, "samples")] = float(self.samples)
            metrics[metric_key("eval", name, "tokens")] = float(self.tokens)
            self._log(metrics)
            entry["eval"][name] = res.entry()
            entry["per_problem"][name], entry["problem_ids"][name] = res.correct, res.ids
            if res.samples and mlflow:
                table = {k: [x[k] for x in res.samples] for k in res.samples[0]}
                folder = "completions" if name == self.task_name else f"completions/{name}"
                self._out.table(f"{folder}/step_{self.rl_step:06d}.json", table)
        if mlflow:
            table = per_problem_table(entry["problem_ids"], entry["per_problem"], self.eval_cfg.n)
            self._out.table(f"per_problem/step_{self.rl_step:06d}.json", table)
        self.eval_history.append(entry)
        if self._blame_probe is not None:
            self._log_blame(entry)
        primary = entry["eval"][next(iter(self.eval_tasks))]["pass_at_1"]
        # the same value in every process (the results were gathered)
        self.log("eval_pass_at_1", primary, prog_bar=True, logger=False, sync_dist=True)
        self._eval_block.__exit__(None, None, None)
