"""The answer past `--max-connections` (tfspec/serve/server.py): uvicorn's refusal replaced by
tfspec's JSON one in the module of the very protocol class the server runs, and checked to have
taken effect rather than assumed; a uvicorn whose protocol offers no such hook keeps its own
answer and the server says so."""

from __future__ import annotations

import sys
import types

import pytest

pytest.importorskip("uvicorn")

from tfspec.serve import server  # noqa: E402
from tfspec.serve.connections import protocol  # noqa: E402


def test_the_protocol_the_server_runs_answers_busy_as_tfspec():
    http = protocol(5.0, 4)
    assert server._answer_busy_as_tfspec(http)
    base = next(c for c in http.__mro__ if c.__module__.startswith("uvicorn.protocols.http."))
    assert sys.modules[base.__module__].service_unavailable is server.BUSY


def test_a_protocol_without_the_hook_keeps_uvicorns_answer_and_says_so(monkeypatch, capsys):
    module = types.ModuleType("uvicorn.protocols.http.future_impl")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    future = type("FutureProtocol", (), {"__module__": module.__name__})
    assert server._answer_busy_as_tfspec(type("Deadlined", (future,), {})) is False
    assert not hasattr(module, "service_unavailable")
    assert "plain-text 503" in capsys.readouterr().err
