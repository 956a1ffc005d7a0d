"""Lines of frames for CTC (Graves et al. 2006, §4) and the framewise baseline: batches, both
losses, transcription; the ``ctc`` task (``tasks.ctc``) trains with them.

Both objectives train the same spec on the same lines and steps. CTC needs only each line's
labelling: ``torch.nn.functional.ctc_loss`` sums over every alignment (the forward-backward
recursion of §4.1). The baseline needs the label of every frame, known here because the
lines were composed from known positions, and learns them by cross-entropy; it is decoded by
collapsing the most probable frame labels, as a CTC output is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tfspec.ctc import greedy, prefix_beam_search
from tfspec.train_options import LinesConfig

from .tasks import named
from .process import stop_requests
from .trainer import Trainer

IGNORE = -100
"""Frame target of padding (cross-entropy's ignore_index)."""


def make_batch(lines, symbols: list[str]) -> dict[str, torch.Tensor]:
    """Frames (B, n, features) zero-padded, ``lengths``, the labellings concatenated
    (``targets``, ``target_lengths``) and per-frame labels (``frame_targets``, blank in gaps)."""
    ids = {c: i for i, c in enumerate(symbols)}
    n = max(len(line.frames) for line in lines)
    frames = np.zeros((len(lines), n, lines[0].frames.shape[1]), dtype=np.float32)
    frame_targets = np.full((len(lines), n), IGNORE, dtype=np.int64)
    for row, line in enumerate(lines):
        frames[row, :len(line.frames)] = line.frames
        labels = np.array([ids[""]] + [ids[c] for c in line.text])  # position + 1; -1 (a gap) -> blank
        frame_targets[row, :len(line.frames)] = labels[line.frame_positions.astype(np.int64) + 1]
    return {"frames": torch.from_numpy(frames), "lengths": torch.tensor([len(x.frames) for x in lines]),
            "targets": torch.tensor([ids[c] for line in lines for c in line.text], dtype=torch.long),
            "target_lengths": torch.tensor([len(x.text) for x in lines]),
            "frame_targets": torch.from_numpy(frame_targets)}


def log_probs_of(model, batch) -> torch.Tensor:
    """(B, n, classes) frame log-probabilities of the model's CTC head."""
    return model.run({"frames": batch["frames"], "lengths": batch["lengths"]}, ("log_probs",))["log_probs"]


def ctc_loss(model, batch, blank: int) -> torch.Tensor:
    """-ln p(labelling | frames) summed over the batch (eq. 12-13)."""
    log_probs = log_probs_of(model, batch).transpose(0, 1)  # (n, B, classes), as ctc_loss wants
    return F.ctc_loss(log_probs, batch["targets"], batch["lengths"], batch["target_lengths"], blank=blank,
                      reduction="sum")


def framewise_loss(model, batch, blank: int) -> torch.Tensor:
    """Cross-entropy of every real frame's label, summed (the baseline's objective)."""
    return F.nll_loss(log_probs_of(model, batch).flatten(0, 1), batch["frame_targets"].flatten(),
                      ignore_index=IGNORE, reduction="sum")


OBJECTIVES = {"ctc": ctc_loss, "framewise": framewise_loss}


def train_lines(spec, lines, run: Path, config: LinesConfig, objective: str, progress: bool = True,
                log=print, resume: bool = False) -> tuple[torch.nn.Module, dict]:
    """Train ``spec`` on ``lines`` with ``objective`` (ctc or framewise) into ``run`` (the ``ctc``
    task's loop); return the model and the last metrics line (at least the step reached)."""
    trainer = Trainer(named("ctc")(spec, config, lines, objective), run, progress=progress, log=log,
                      stops=stop_requests)
    last = trainer.fit(resume)
    return trainer.model.eval(), last or {"step": trainer.state["step"]}


@torch.no_grad()
def transcribe_lines(model, lines, head, beam: int = 1, batch: int = 64) -> list[str]:
    """Decode each line's frames: best path (``beam`` 1) or prefix beam search."""
    texts = []
    for start in range(0, len(lines), batch):
        chunk = lines[start:start + batch]
        log_probs = log_probs_of(model.eval(), make_batch(chunk, head.symbols)).numpy()
        for row, line in zip(log_probs, chunk):
            frames = row[:len(line.frames)]
            ids = greedy(frames, head.blank) if beam == 1 else prefix_beam_search(frames, beam, head.blank)
            texts.append("".join(head.symbols[i] for i in ids))
    return texts
