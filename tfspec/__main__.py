"""`python -m tfspec` is the `tfspec` command."""

from tfspec.cli import main

raise SystemExit(main())
