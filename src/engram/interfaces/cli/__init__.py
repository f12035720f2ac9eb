"""The `engram` command: a thin skin over the Python API (command = method name), one module per group."""

# Importing a module registers its commands, and this order is the order `engram --help` lists them in.
# isort: off
from engram.interfaces.cli import memory_commands
from engram.interfaces.cli import service_commands
from engram.interfaces.cli import maintenance_commands
from engram.interfaces.cli import users_commands
from engram.interfaces.cli.common import app, one_line_summaries, print_hits

# isort: on
one_line_summaries(app)

__all__ = [
    "app",
    "maintenance_commands",
    "memory_commands",
    "print_hits",
    "service_commands",
    "users_commands",
]
