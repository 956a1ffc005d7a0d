"""The shipped specs (YAML files beside this one), installed as ``tfspec.specs`` so they
travel with the package and can be named on the command line (``tfspec report base``)."""
