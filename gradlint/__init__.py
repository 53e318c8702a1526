"""gradlint: find the PyTorch autograd patterns that make training memory climb."""

__version__ = "0.1.0"
