"""tools/bench/quant_quality.py's perplexity, KL divergence and agreement against torch's own losses."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "bench"))

from quant_quality import scores, summary  # noqa: E402


def test_perplexity_kl_and_agreement_match_torch_over_batches():
    rng = np.random.default_rng(0)
    batches = [(rng.normal(0, 3, (n, 50)).astype(np.float32), rng.normal(0, 3, (n, 50)).astype(np.float32),
                rng.integers(0, 50, n)) for n in (7, 13)]
    total = {"nll": 0.0, "kl": 0.0, "agree": 0, "n": 0}
    for logits, reference, targets in batches:
        for key, value in scores(logits, reference, targets).items():
            total[key] += value
    got = summary(total)
    logits, reference, targets = (torch.from_numpy(np.concatenate(x)) for x in zip(*batches))
    assert math.isclose(got["perplexity"], math.exp(F.cross_entropy(logits, targets).item()), rel_tol=1e-5)
    kl = F.kl_div(F.log_softmax(logits, -1), F.log_softmax(reference, -1), log_target=True, reduction="batchmean")
    assert math.isclose(got["kl"], kl.item(), rel_tol=1e-4)
    assert got["next_token_agreement"] == (logits.argmax(-1) == reference.argmax(-1)).float().mean().item()


def test_an_export_equal_to_the_reference_has_no_divergence_and_full_agreement():
    logits = np.random.default_rng(1).normal(0, 5, (9, 30)).astype(np.float32)
    got = summary(scores(logits, logits, np.zeros(9, np.int64)))
    assert abs(got["kl"]) < 1e-12 and got["next_token_agreement"] == 1.0
