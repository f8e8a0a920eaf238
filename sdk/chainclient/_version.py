"""The package version, in a module of its own so that any module can read it without
importing the package (which imports them: that would be an import circle)."""

__version__ = "0.3.0"
