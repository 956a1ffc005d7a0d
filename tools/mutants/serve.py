"""Mutants in `tfspec serve`'s continuous batching (tfspec/serve/scheduler.py, service.py and
backends/onnx/splice.py): the splice of a newcomer's cache into the running batch, each row's own
sampler, rows leaving when cancelled."""

SCHEDULER = "tfspec/serve/scheduler.py"
JOINS = "tests/test_serve_continuous.py::test_rows_join_and_leave_between_steps"

MUTANTS = [
    dict(name="continuous batching: a row padded at a join keeps its old positions",
         file="backends/onnx/splice.py",
         old="shift[rows] = width - w + (0 if",
         new="shift[rows] = 0 + (0 if",
         tests=[JOINS]),
    dict(name="continuous batching: a sampled row sharing a greedy step draws from one candidate",
         file=SCHEDULER,
         old="picking = 1 if self.pick is None else self.pick.k",
         new="picking = 1 if self.pick is None else 1",
         tests=[JOINS]),
    dict(name="continuous batching: a cancelled request's row stays in the batch",
         file=SCHEDULER,
         old="if rows and any(row.job.cancelled for row in rows):",
         new="if False and any(row.job.cancelled for row in rows):",
         tests=[JOINS]),
    dict(name="continuous batching: a --fused export's in-place buffers dropped for the standard cache",
         file="tfspec/serve/service.py",
         old='if self.decoder_only and config.batching == "continuous" and not continuous(decoder):',
         new='if self.decoder_only and config.batching == "continuous":',
         tests=["tests/test_serve_continuous.py::test_a_fused_export_batches_continuously_over_its_in_place_buffers"]),
]
