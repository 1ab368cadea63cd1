"""The ``rquad`` subcommands: the only place that parses command-line arguments.

Each module exposes ``register(subparsers)``, which adds its parser(s) and sets ``func`` (called
with the parsed namespace, returns an exit code); ``residual_quad.cli`` lists the modules. Library
code never imports from here.
"""
