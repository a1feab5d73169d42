"""CLI subcommands, one module each (``register(subparsers)``)."""
