"""The prompts a run trains and evaluates on: the train order (seeded, replayable from any batch, cut
into each process's share), the refill stream of dynamic sampling, and the eval sets."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from bench.config import EvalConfig
from bench.core import Task
from bench.distributed import rank, world_size
from bench.errors import CreditBenchError

_KEPT: dict[tuple[str, ...], Any] | None = None
"""Generated splits kept for the process's next runs, when :func:`keep_generated_splits` is on."""


def keep_generated_splits(on: bool = True) -> None:
    """Keep the splits of generated tasks (those without data files, e.g. arithmetic's 200,000 train
    problems, seconds of pure Python) for the next runs in this process: a sweep worker runs many runs
    of the same task. A generated split is a function of the task's class, version and config."""
    global _KEPT
    _KEPT = {} if on else None


def load_split(task: Task, split: str):
    """``task.load(split)``, or the same split kept from an earlier run (see :func:`keep_generated_splits`)."""
    if _KEPT is None or getattr(task, "sources", None):  # data files may change between runs: read them again
        return task.load(split)
    cls = type(task)
    config = json.dumps(dataclasses.asdict(task.config), sort_keys=True, default=str)
    key = (cls.__module__, cls.__qualname__, str(getattr(task, "VERSION", "")), config, split)
    if key not in _KEPT:
        if len(_KEPT) >= 8:  # the oldest goes: a sweep's runs share a few tasks
            _KEPT.pop(next(iter(_KEPT)))
        _KEPT[key] = task.load(split)
    return _KEPT[key]


def _rows(batch: list[dict]) -> list[dict]:
    """The collate function: a batch is the list of its rows, as the task loaded them."""
    return batch


class ReplayedLoader(DataLoader):
    """The train loader. Its position is the data module's state (a resumed run's batch sampler
    starts where the checkpoint left off, see :class:`PromptBatches`), so it resumes exactly; the
    empty ``state_dict`` says so to Lightning, which otherwise warns on every resume that the loader
    is not resumable."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class PromptBatches:
    """The train prompts' batch order: pass after pass over the rows, each pass a seeded random
    permutation cut into batches of ``prompts_per_step`` (the last incomplete one dropped) -- the
    order ``DataLoader(rows, batch_size, shuffle=True, drop_last=True, generator=g)`` draws, with
    ``g`` seeded with the run's seed. Batch ``i`` depends only on the seed and ``i`` (the generator is
    replayed from the seed), so a resumed run (``start``: the batches already consumed) continues the
    same order however Lightning counts its epochs. With W processes each takes the ``rank``-th of W
    contiguous slices of every batch (whole prompts, hence whole groups)."""

    def __init__(self, num_rows: int, batch_size: int, seed: int, rank: int = 0, world: int = 1, start: int = 0):
        self.num_rows, self.batch_size, self.seed, self.rank, self.world = num_rows, batch_size, seed, rank, world
        self.per_pass = num_rows // batch_size
        self.start = start  # the next batch of the stream to yield

    def __len__(self) -> int:
        return self.per_pass

    def _order(self, n_pass: int) -> list[int]:
        g = torch.Generator().manual_seed(self.seed)
        for p in range(n_pass + 1):  # what each pass of a shuffling DataLoader draws from its generator:
            torch.empty((), dtype=torch.int64).random_(generator=g)  # its iterator's base seed,
            order = torch.randperm(self.num_rows, generator=g)  # the permutation,
            if p < n_pass:
                torch.randperm(self.num_rows, generator=g)  # and RandomSampler's empty remainder permutation
        return order.tolist()

    def __iter__(self):
        n_pass, skip = divmod(self.start, self.per_pass)
        order = self._order(n_pass)
        k = self.batch_size // self.world
        for b in range(skip, self.per_pass):
            self.start += 1
            batch = order[b * self.batch_size : (b + 1) * self.batch_size]
            yield batch[self.rank * k : (self.rank + 1) * k]


class PromptDataModule(L.LightningDataModule):
    """Train prompts in a seeded random order, ``prompts_per_step`` per RL step; eval problems in
    fixed order, one dataloader per eval task (the training task first).

    With W processes (DDP) every process draws the same seeded global order and takes its
    contiguous 1/W of each step's prompts; each eval set is cut into W contiguous chunks, which
    the module gathers back in order. The Trainer must leave the samplers as they are
    (``use_distributed_sampler=False``)."""

    def __init__(
        self,
        task: Task,
        prompts_per_step: int,
        eval_cfg: EvalConfig,
        seed: int,
        eval_tasks: dict[str, Task] | None = None,
    ):
        super().__init__()
        self.task, self.prompts_per_step, self.eval_cfg, self.seed = task, prompts_per_step, eval_cfg, seed
        self.eval_tasks = eval_tasks
        self.train_rows = self.eval_rows = None
        self.batches_consumed = 0  # train batches already trained on (set when resuming)
        self.refill_drawn = 0  # prompts drawn from the refill stream, by every process together

    def setup(self, stage: str | None = None) -> None:
        if self.train_rows is None:
            self.train_rows = load_split(self.task, "train")
            tasks = self.eval_tasks or {"": self.task}
            if self.eval_cfg.validation:  # the train split's tail, held out of training (a tuning run's)
                n, k = len(self.train_rows), self.eval_cfg.num_problems
                if n < 2 * k:
                    raise CreditBenchError(
                        f"eval.validation: task {self.task.name!r}'s train split has {n} problems, too few to "
                        f"hold out {k} (eval.num_problems) and train on the rest; lower eval.num_problems"
                    )
                self.eval_sets = [self.train_rows.select(range(n - k, n))]
                self.train_rows = self.train_rows.select(range(n - k))
            else:
                self.eval_sets = []
                for task in tasks.values():
                    ev = load_split(task, "eval")
                    self.eval_sets.append(ev.select(range(min(self.eval_cfg.num_problems, len(ev)))))
            self.eval_rows = self.eval_sets[0]

    def train_dataloader(self) -> DataLoader:
        world = world_size()
        if self.prompts_per_step % world:
            raise CreditBenchError(
                f"rl.prompts_per_step ({self.prompts_per_step}) must be divisible by the number "
                f"of processes ({world}): each process rolls out whole groups"
            )
        if len(self.train_rows) < self.prompts_per_step:
            raise CreditBenchError(
                f"task {self.task.__class__.__name__} has {len(self.train_rows)} train problems, fewer "
                f"than rl.prompts_per_step ({self.prompts_per_step})"
            )
        batches = PromptBatches(
            len(self.train_rows), self.prompts_per_step, self.seed, rank(), world, start=self.batches_consumed
        )
        # its own generator: creating an iterator draws a seed from it, never from the global RNG
        return ReplayedLoader(
            self.train_rows, batch_sampler=batches, collate_fn=_rows, generator=torch.Generator().manual_seed(self.seed)
        )

    def state_dict(self) -> dict[str, int]:
        """The data position, for a checkpoint: one train batch per completed RL step."""
        return {"batches_consumed": self.trainer.lightning_module.rl_step, "refill_drawn": self.refill_drawn}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.batches_consumed, self.refill_drawn = state["batches_consumed"], state["refill_drawn"]
        self.__dict__.pop("_refill", None)

    def refill(self, n: int) -> list[dict]:
        """``n`` more train prompts for a step whose groups were dropped (dynamic sampling), from a
        separately seeded stream so the main data order does not depend on the method. With W
        processes each call takes the stream's next n x W prompts and returns this process's
        share, so no two processes get the same fresh prompt however many calls each makes."""
        if not hasattr(self, "_refill"):

            def stream(skip: int):
                g = torch.Generator().manual_seed(self.seed + 1_000_003)
                while True:
                    for i in torch.randperm(len(self.train_rows), generator=g).tolist():
                        if skip:
                            skip -= 1
                            continue
                        yield self.train_rows[i]

            self._refill = stream(self.refill_drawn)
        world, r = world_size(), rank()
        chunk = [next(self._refill) for _ in range(n * world)]
        self.refill_drawn += n * world
        return chunk[r * n : (r + 1) * n]

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        world, r = world_size(), rank()
        shares = [
            rows if world == 1 else rows.select(range(r * len(rows) // world, (r + 1) * len(rows) // world))
            for rows in self.eval_sets
        ]
        loaders = [
            DataLoader(
                rows,
                batch_size=self.eval_cfg.batch_problems,
                collate_fn=_rows,
                generator=torch.Generator().manual_seed(self.seed),
            )
            for rows in shares
        ]
        return loaders[0] if len(loaders) == 1 else loaders
