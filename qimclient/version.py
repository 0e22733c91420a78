"""The package version, which is also the `client_version` AUTH sends by default."""

__version__ = "1.1.0"
