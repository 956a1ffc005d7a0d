"""The Node.js client (clients/node) prints what `tfspec translate` prints: its own tests
(``node --test``) run against exports and outputs written here (tests/node_fixture.py).

Skipped where node or clients/node/node_modules is missing, unless TFSPEC_REQUIRE_JS=1 (as
.ci/run sets it after `npm ci`), where that is a failure instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import node_fixture

CLIENT = Path(__file__).resolve().parent.parent / "clients" / "node"


def missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    if not (CLIENT / "node_modules" / "onnxruntime-node").is_dir():
        return "clients/node/node_modules is missing: (cd clients/node && npm ci --ignore-scripts)"
    return None


def test_node_client_prints_what_translate_prints(tmp_path):
    if reason := missing():
        if os.environ.get("TFSPEC_REQUIRE_JS") == "1":
            pytest.fail(f"TFSPEC_REQUIRE_JS=1 but {reason}")
        pytest.skip(reason)
    node_fixture.write(tmp_path)
    tests = sorted(str(p.relative_to(CLIENT)) for p in (CLIENT / "test").glob("*.test.mjs"))
    done = subprocess.run(["node", "--test", *tests], cwd=CLIENT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TFSPEC_JS_FIXTURE": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout and "# skipped 0" in done.stdout and "# pass 0" not in done.stdout
