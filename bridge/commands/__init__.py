"""Command-line entry points: ``serve`` (cli), and the client-side ``replay`` and ``client-config``."""
