"""The package version (its own module: the download code reads it without importing the package's lazy exports)."""

__version__ = "0.1.0"
