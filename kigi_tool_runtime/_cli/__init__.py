"""The ``kigi-stream`` command line."""
