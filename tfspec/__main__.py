"""`python -m tfspec` is the `tfspec` command."""

from tfspec.cli import command

raise SystemExit(command())
