"""Training tasks, one module each, found by scanning this package: what a task reads, how it
batches, its loss, its metrics and its evaluation (``trainer.Task``); the loop is ``trainer``'s.

A task module registers its class with ``@task(name)``; the class says which specs it trains
(``fits``, in words ``trains``) and what it reads (``holds``, in words ``reads``). ``task_for``
finds the task of a spec from its family, heads, image and frames, or checks the one ``--task``
names; a reader refuses a directory that does not hold its data with ``misfit``, which names
the task that would read it. A new task is one new file here.
"""

from __future__ import annotations

from tfspec.errors import TfspecError
from tfspec.registry import discover, registrar

TASKS: dict[str, type] = {}
"""Task name -> its ``trainer.Task`` subclass."""
_register = registrar(TASKS, "training tasks")


def task(name: str):
    """Register the decorated ``Task`` subclass as ``name`` (a second one of that name is refused)."""
    def register(cls):
        cls.name = name
        return _register(name)(cls)
    return register


def tasks() -> dict[str, type]:
    """Every task, its module imported."""
    discover(__name__)
    return TASKS


def named(name: str) -> type:
    """The task registered as ``name``."""
    return tasks()[name]


def task_for(spec, name: str | None = None) -> type:
    """The task that trains ``spec``: the one ``name`` asks for (which must fit the spec), else
    the only one that fits; refused, saying what each task trains, when none or several do."""
    known = tasks()
    fitting = [n for n, t in known.items() if t.fits(spec)]
    if name is not None:
        if name not in known:
            raise TfspecError(f"--task {name}: no such task; the tasks are {', '.join(sorted(known))}")
        if name not in fitting:
            raise TfspecError(f"--task {name} trains {known[name].trains}; {spec.name} is not one"
                              + (f" (it fits {', '.join(fitting)})" if fitting else ""))
        return known[name]
    if len(fitting) == 1:
        return known[fitting[0]]
    if fitting:
        raise TfspecError(f"{spec.name} fits the tasks {', '.join(fitting)}: choose one with --task")
    listed = "; ".join(f"{n}: {t.trains}" for n, t in sorted(known.items()))
    raise TfspecError(f"{spec.name}: no training task fits this spec (family {spec.family}"
                      f"{f', head {spec.head.kind}' if spec.head is not None else ''}); the tasks train {listed}")


def misfit(spec, task: type, data, reason: str) -> TfspecError:
    """The refusal of ``data`` by ``task``'s reader: ``reason``, or which tasks read what it holds."""
    others = [t for t in tasks().values() if t is not task and data is not None and t.holds(data)]
    read = f"{spec.name} is trained by the {task.name} task, which reads {task.reads}"
    if not others:
        return TfspecError(f"{reason}; {read}")
    by = ", ".join(f"the {t.name} task ({t.trains})" for t in others)
    return TfspecError(f"{data} holds {others[0].reads}, for {by}; {read}")
