"""What the training loop, ``tfspec train``, its digit-line (CTC) runs and ``tfspec finetune`` are told.

Options models (``tfspec.options``): frozen, unknown keywords refused with the closest field
named, each bound declared once in the field's type. The commands' flags are generated from
these fields (``tfspec.cli.fields``), so ``TrainConfig(accum=0)`` and ``tfspec train ... --accum
0`` are refused in the same words. In the core, not beside the loop in ``backends.torch``: the
command line builds its parser from them without importing torch. Defaults are the paper's
recipe (§5) for translation and BERT's (Devlin et al. 2019, appendix A.3) for fine-tuning.
"""

from __future__ import annotations

from tfspec.options import Options, choice, number, options, whole
from tfspec.spec.bounds import MAX_STEPS

STEPS = whole(1, MAX_STEPS)
"""A count of optimizer steps (a run's length, a warm-up, an interval)."""
SEED = whole(0, 2**32 - 1)
"""A seed torch and numpy both take."""
KEPT = whole(1, 10**6)
"""Checkpoints kept."""
MINUTES = number(0, 1e7)
"""Wall-time limit in minutes; 0: none."""
LR_SCALE = number(0, 1e8, low_open=True)
"""A factor on eq. 3's rate: past ~10 most runs diverge, which the loop detects and stops (a
divergence test drives it to 1e7 on purpose)."""
CLIP = number(0, 1e6)
"""A gradient-norm bound; 0: none."""


@options
class Loop(Options):
    """What the loop itself is told, whatever the task. A task's options either extend this
    (``TrainConfig``) or are read by name (``Loop.of``), leaving the fields they lack at their
    defaults here."""

    steps: STEPS
    """Optimizer steps to reach (a resumed run continues up to this)."""
    seed: SEED = 0
    """Seed of the initial weights, the dropout masks and the data order."""
    save_every: STEPS = 500
    """Steps between checkpoints."""
    keep: KEPT = 5
    """Checkpoints kept (`tfspec average` takes the last k)."""
    log_every: STEPS = 10
    """Steps between metrics lines."""
    max_minutes: MINUTES = 0.0
    """Stop with a checkpoint after this many minutes in this process; 0: no limit."""
    clip: CLIP = 0.0
    """Gradient-norm clipping; 0 disables (the paper does not clip)."""
    accum: whole(1, 4096) = 1
    """Batches per optimizer step and process: gradients are reduced across processes once, after the last."""
    shard: choice("ddp", "fsdp") = "ddp"
    """Under torchrun, how processes hold the model: ddp keeps all of it, its gradients and Adam
    moments on every process; fsdp (PyTorch's FSDP2) shards them, each layer of the spec gathered
    only while it runs, so memory per process falls with their number (bf16 weights and
    reductions on CUDA, fp32 on CPU). `tfspec report SPEC --train` predicts both.

    Read by ``sharding.parallelize``."""
    checkpoint_activations: bool = False
    """Keep only each layer's input and recompute the rest during the backward pass: less memory
    (`tfspec report --train` says how much) for about one more forward pass of time."""
    compile: bool = False
    """torch.compile each layer (before sharding) for faster steps after a first slow one; needs a
    C++ compiler on CPU."""
    sharded: bool = False
    """Each process writes its own part of every checkpoint (torch.distributed.checkpoint), so no
    process gathers the whole model and optimizer; --resume reshards them to any number of
    processes. RUN must then be one directory every process reads and writes (docs/training.md).

    Checkpoint format 2; format 1 (one file, gathered on rank 0) otherwise."""

    @classmethod
    def of(cls, config, **given) -> Loop:
        """The loop's fields that ``config`` has, the ``given`` ones, the rest at their defaults."""
        names = cls.__pydantic_fields__
        return cls(**{name: getattr(config, name) for name in names if hasattr(config, name)} | given)


@options
class TrainConfig(Loop):
    """The paper's recipe (§5): the loop's options, length-grouped batches and eq. 3's schedule."""

    steps: STEPS = 1000
    """Optimizer steps (a resumed run continues up to this)."""
    batch_tokens: whole(8, 2**24) = 4096
    """Tokens per batch incl. padding (the paper: ~25000 source + 25000 target per step)."""
    warmup: STEPS = 4000
    """Warm-up steps of eq. 3's learning rate."""
    lr_scale: LR_SCALE = 1.0
    """Multiplies eq. 3's rate (small batches often want 2)."""


@options
class LinesConfig(Options):
    """One objective's training on lines of frames (CTC or the framewise baseline, ``training.ctc``):
    ``tfspec train`` on digit lines reads these from its own flags, the limit of time halved."""

    steps: STEPS = 4000
    """Optimizer steps (--max-minutes may end the run sooner)."""
    batch: whole(1, 65536) = 16
    """Lines per step."""
    warmup: STEPS = 400
    """Warm-up steps of eq. 3's learning rate."""
    lr_scale: LR_SCALE = 1.0
    """Multiplies eq. 3's rate."""
    seed: SEED = 0
    """Seed of the initial weights and the order of the lines."""
    max_minutes: MINUTES = 0.0
    """Wall-time limit of this objective's training in minutes; 0: none."""
    save_every: STEPS = 1000
    """Steps between checkpoints."""
    keep: KEPT = 2
    """Checkpoints kept."""


@options
class FinetuneConfig(Options):
    """BERT's fine-tuning recipe (``backends.torch.finetune``): AdamW, linear warm-up and decay,
    clipped gradients, a few epochs."""

    epochs: whole(1, 10**4) = 3
    """Passes over train."""
    batch: whole(1, 65536) = 32
    """Texts per step (BERT: 16 or 32)."""
    lr: number(0, 1, low_open=True) = 5e-5
    """Peak learning rate: BERT's default; a small encoder takes ~1e-3.

    BERT takes 2e-5 to 5e-5 for a large pretrained body; small ones take more."""
    warmup: number(0, 1) = 0.1
    """Share of steps spent warming up to the peak rate."""
    weight_decay: number(0, 1) = 0.01
    """Weight decay, decoupled as AdamW's (biases and norms excluded)."""
    clip: CLIP = 1.0
    """Gradient-norm clipping; 0 disables."""
    seed: SEED = 0
    """Seed of the new head's weights, the dropout masks and the batch order."""
    save_every: STEPS = 500
    """Steps between checkpoints."""
    keep: KEPT = 2
    """Checkpoints kept."""
    log_every: STEPS = 20
    """Steps between metrics lines."""
    max_minutes: MINUTES = 0.0
    """Stop with a checkpoint after this many minutes; 0: no limit."""
