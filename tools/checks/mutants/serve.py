"""Mutants in `tfspec serve`: its continuous batching (tfspec/serve/scheduler.py, service.py and
backends/onnx/runtime/splice.py: the splice of a newcomer's cache into the running batch, each row's own
sampler, rows leaving when cancelled), its connections (connections.py: idle ones given up, the
header deadline), the pieces log-probabilities spell (detokenize.py) and OpenAI's nulls (schemas.py)."""

SCHEDULER = "tfspec/serve/scheduler.py"
JOINS = "tests/test_serve_continuous.py::test_rows_join_and_leave_between_steps"
SLOW = "tests/test_serve_slow_clients.py"
CONFORMANCE = "tests/test_serve_conformance.py"

MUTANTS = [
    dict(name="continuous batching: a row padded at a join keeps its old positions",
         file="backends/onnx/runtime/splice.py",
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
    dict(name="connections: an idle connection is never given up for a newcomer",
         file="tfspec/serve/connections.py",
         old="    if idle:\n",
         new="    if False:\n",
         tests=[f"{SLOW}::test_idle_sockets_never_keep_a_client_out_and_close_at_the_header_deadline"]),
    dict(name="connections: the header deadline never closes a trickling client",
         file="tfspec/serve/connections.py",
         old="if self.idle:  # a request",
         new="if False:  # a request",
         tests=[f"{SLOW}::test_headers_trickled_a_line_at_a_time_are_cut_at_the_header_deadline"]),
    dict(name="logprobs: a token's piece loses its leading space",
         file="tfspec/serve/detokenize.py",
         old="self.pieces[-1] += new",
         new="self.pieces[-1] += new.lstrip()",
         tests=[f"{CONFORMANCE}::test_completion_logprobs_spell_the_text_streamed_as_unary"]),
    dict(name="OpenAI bodies: null refused where OpenAI documents it",
         file="tfspec/serve/schemas.py",
         old="return {k: v for k, v in data.items() if v is not None or k not in optional}",
         new="return data",
         tests=[f"{CONFORMANCE}::test_every_field_the_client_declares_nullable_is_accepted_as_none"]),
]
