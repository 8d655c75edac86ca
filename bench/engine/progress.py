"""Progress a person can trust: every bar and line counts a run's own unit against its real total.

Lightning's bar counts the batches of the current epoch against the epoch's length and names the
epoch. An RL run, which its module stops after ``rl.steps`` steps, showed the prompt loader's
length (``4/12500 • 1 day`` for a 4-step run), and the warm-start, which ``max_steps`` stops,
``Epoch 0/-2 ... 5/3000``. :class:`StepBar` is one bar over the whole run (its RL steps, or the
warm-start's optimizer steps) against ``total``, starting where a resumed run starts, so its rate
and time left are the run's own. With bars off (``--no-progress``, and every run of a sweep, whose
output goes to a log file) :class:`StepLines` writes the same progress as a plain line now and
then, flushed at once, so a log shows where a run is while it runs. :func:`counter` does the same
outside Lightning (``creditbench eval``'s problems): a bar on a terminal, lines otherwise.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from lightning.pytorch.callbacks import Callback, TQDMProgressBar

LINE_EVERY_S = 30.0
"""At most one progress line this often (the first and the last are always written)."""

Position = Callable[[Any, Any], int]
"""(trainer, module) -> the steps done so far."""


def duration(seconds: float) -> str:
    """``42 s``, ``7 min``, ``2.5 h``: as precise as a person planning their time needs."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _shown(metrics: dict[str, Any]) -> dict[str, float]:
    """The progress-bar metrics worth a line, as plain floats (Lightning's own version number is not)."""
    out = {}
    for k, v in metrics.items():
        if k != "v_num":
            try:
                out[k] = float(v)
            except (TypeError, ValueError):
                continue
    return out


class Lines:
    """Plain progress lines, ``RL: step 3/8, 2.1 s/step, about 11 s left; reward 0.31``: the first
    update, the last, and at most one every ``every_s`` seconds in between. The rate is measured
    from ``start`` (where a resumed run picks up), so the time left is this process's own estimate."""

    def __init__(
        self, label: str, total: int, unit: str = "step", start: int = 0, every_s: float = LINE_EVERY_S, file=None
    ):
        self.label, self.total, self.unit, self.start, self.every_s = label, total, unit, start, every_s
        self.file: IO[str] | None = file  # None: sys.stdout when written (a sweep's worker points it at a log)
        self.t0 = time.perf_counter()
        self._last: float | None = None
        self._last_n: int | None = None

    def text(self, n: int, extra: dict[str, float] | None = None, now: float | None = None, final: bool = False) -> str:
        now = time.perf_counter() if now is None else now
        out = f"{self.label}: {self.unit} {n}/{self.total}"
        done, elapsed = n - self.start, now - self.t0
        if done > 0:
            out += f", {elapsed / done:.3g} s/{self.unit}"
            left = self.total - n
            out += (
                f", about {duration(elapsed / done * left)} left"
                if left > 0 and not final
                else f", done in {duration(elapsed)}"
            )
        if extra:
            out += "; " + ", ".join(f"{k} {v:.4g}" for k, v in extra.items())
        return out

    def update(self, n: int, extra: dict[str, float] | None = None, final: bool = False) -> None:
        """Write the line for ``n`` done if it is due; ``final``: the run ended (a line unless ``n``'s was written)."""
        now = time.perf_counter()
        due = self._last is None or n >= self.total or now - self._last >= self.every_s
        if not (final or due) or n == self._last_n:
            return
        self._last, self._last_n = now, n
        print(self.text(n, extra, now, final), file=self.file or sys.stdout, flush=True)

    def close(self) -> None:
        pass


class Bar:
    """:class:`Lines`' interface over a tqdm bar, for a terminal."""

    def __init__(self, label: str, total: int, unit: str = "step", file=None):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc=label, unit=unit, file=file or sys.stderr, dynamic_ncols=True)

    def update(self, n: int, extra: dict[str, float] | None = None) -> None:
        self.bar.n = n
        if extra:
            self.bar.set_postfix({k: f"{v:.3g}" for k, v in extra.items()}, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def counter(label: str, total: int, unit: str, file=None) -> Bar | Lines:
    """A bar where ``file`` (default stderr) is a terminal, plain lines where it is a log or a pipe."""
    file = file or sys.stderr
    return Bar(label, total, unit, file) if file.isatty() else Lines(label, total, unit, file=file)


class StepBar(TQDMProgressBar):
    """Lightning's bar with one line over the run's steps (see the module docstring): ``position``
    gives the steps done, ``total`` the steps the run stops at (at most: a budget may stop it sooner)."""

    def __init__(self, label: str, total: int, position: Position):
        super().__init__()
        self.label, self.total, self.position = label, total, position

    def on_train_start(self, trainer, pl_module) -> None:
        bar = self.train_progress_bar = self.init_train_tqdm()
        start = self.position(trainer, pl_module)
        bar.reset(total=self.total)
        bar.initial = bar.n = start  # tqdm's rate counts from ``initial``: a resumed run's own pace
        bar.set_description(self.label)
        bar.refresh()

    def on_train_epoch_start(self, trainer, *_: Any) -> None:
        pass  # one bar over the run, not one per pass over the data

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        bar = self.train_progress_bar
        if bar is not None and not bar.disable:
            bar.n = self.position(trainer, pl_module)
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
            bar.refresh()

    def get_metrics(self, trainer, pl_module) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)  # the MLflow run id: 32 characters of noise on the bar
        return items


class StepLines(Callback):
    """The bar's progress as plain lines (see :class:`Lines`), written by the first process only."""

    def __init__(self, label: str, total: int, position: Position, every_s: float = LINE_EVERY_S):
        self.label, self.total, self.position, self.every_s = label, total, position, every_s
        self.lines: Lines | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.lines = Lines(self.label, self.total, start=self.position(trainer, pl_module), every_s=self.every_s)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.is_global_zero and self.lines is not None:
            self.lines.update(self.position(trainer, pl_module), _shown(trainer.progress_bar_metrics))

    def on_train_end(self, trainer, pl_module) -> None:  # stopped early (a target, a budget): where it stopped
        if trainer.is_global_zero and self.lines is not None:
            self.lines.update(self.position(trainer, pl_module), _shown(trainer.progress_bar_metrics), final=True)


def step_progress(label: str, total: int, position: Position, bar: bool) -> Callback:
    """The run's progress callback: :class:`StepBar` with bars on (the trainer's
    ``enable_progress_bar`` must then be on), :class:`StepLines` with them off."""
    return StepBar(label, total, position) if bar else StepLines(label, total, position)


def rl_total(rl) -> int:
    """The RL steps a run of ``rl`` (bench.config.RLConfig) takes at most: ``steps``, or fewer when a
    sample budget runs out first (a method that generates more than a group per prompt spends it
    sooner; a token budget cannot be told in advance)."""
    if not rl.budget_samples:
        return rl.steps
    return min(rl.steps, math.ceil(rl.budget_samples / (rl.prompts_per_step * rl.group_size)))


def rl_steps(trainer, module) -> int:
    return module.rl_step


def optimizer_steps(trainer, module) -> int:
    return trainer.global_step
