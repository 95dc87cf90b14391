"""The tool's version (read by the build, by `hlo --version` through hlo_cli.__version__, and by the
parse cache's key): a module of its own, so that no layer needs to import the package's facade."""
__version__ = "0.1.0"
