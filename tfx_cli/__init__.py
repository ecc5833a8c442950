"""tfx: look inside transformers from the command line."""
__version__ = "0.1.0"
