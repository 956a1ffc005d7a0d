"""tfspec: declarative Transformer specs compiled to a graph IR, analyses and backends.

The public API is small: ``load_spec`` reads and validates a YAML spec, ``build_graph``
lowers it into the IR every analysis and backend reads.
"""

__version__ = "0.1.0"

from tfspec.errors import SpecError, TfspecError  # noqa: E402
from tfspec.ir import Graph, build_graph  # noqa: E402
from tfspec.spec import Spec, load_spec  # noqa: E402

__all__ = ["Graph", "Spec", "SpecError", "TfspecError", "build_graph", "load_spec", "__version__"]
