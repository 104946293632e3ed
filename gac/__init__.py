"""GAC: GPU-aligned compression of large language models.

This package holds what every component shares: the wire formats (contracts/)
and the `gac` command line. The components live beside it: service/,
profiler_agent/, solver/.
"""

__version__ = "0.1.0"
DISTRIBUTION = "gpu-aligned-compression"  # the name on PyPI (`gac` there is another project)
