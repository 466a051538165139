"""The package's version, in a leaf of its own: the run's conditions, the saved self-check and
``loadgen --version`` read it without importing the package root (and with it the public API's
lazy imports). pyproject.toml's ``version`` is the same string; a test keeps them equal."""

__version__ = "0.1.0"
