"""Mutants in `tfspec serve`'s continuous batching (tfspec/serve/scheduler.py): the splice of a
newcomer's cache into the running batch, each row's own sampler, rows leaving when cancelled."""

SCHEDULER = "tfspec/serve/scheduler.py"
JOINS = "tests/test_serve_continuous.py::test_rows_join_and_leave_between_steps"

MUTANTS = [
    dict(name="continuous batching: a row padded at a join keeps its old positions",
         file=SCHEDULER,
         old="shift[rows] = width - w + (0 if",
         new="shift[rows] = 0 + (0 if",
         tests=[JOINS]),
    dict(name="continuous batching: a sampled row sharing a greedy step draws from one candidate",
         file=SCHEDULER,
         old="return max((1 if row.pick is None else row.pick.k)",
         new="return max((1 if row.pick is None else 1)",
         tests=[JOINS]),
    dict(name="continuous batching: a cancelled request's row stays in the batch",
         file=SCHEDULER,
         old="if rows and any(row.job.cancelled for row in rows):",
         new="if False and any(row.job.cancelled for row in rows):",
         tests=[JOINS]),
    dict(name="continuous batching: a --fused export's in-place decoder turns it off",
         file="tfspec/serve/app.py",
         old="decoder = self.model.decoder(in_place=False)  # rows join",
         new="decoder = self.model.decoder()  # rows join",
         tests=["tests/test_serve_continuous.py::test_a_fused_export_keeps_rows_joining_over_the_standard_cache"]),
]
