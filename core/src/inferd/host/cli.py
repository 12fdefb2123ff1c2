"""The ``inferd`` command: ``serve`` (Triton's flag spellings), ``plugins``, ``check`` (a repository,
offline), and the client tools ``perf``, ``analyze`` and ``health``.

Every ``inferd`` process runs this module first, so it loads little: a tool command loads its own
module (``inferd health``: 0.1 s of CPU where loading the server took 0.35 s); ``serve``, ``plugins``,
``--help`` and anything else load the full command line, :mod:`inferd.host.serve_command`.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Sequence

from inferd.engine import gc_settings
from inferd.host.arguments import SuggestingParser
from inferd.host.huge_pages import start_over_with_huge_pages
from inferd.tools import COMMANDS, command

# The collector's serving thresholds for the whole start-up, from here: the imports, plugins and
# model loads that follow. A process that multiprocessing spawns from `inferd serve` (vLLM's engine)
# runs this module first too (as __mp_main__, or imported by the `inferd` script), so it starts the same way.
gc_settings.start_up()


def main(argv: Sequence[str] | None = None) -> int:
    """``inferd ARGV`` (``sys.argv[1:]`` by default); the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in COMMANDS:  # the tool's parser alone: its usage and errors read as in the full one
        tool = command(args[0])
        parser = SuggestingParser(prog="inferd")
        tool.add_parser(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
        return int(tool.run(parser.parse_args(args)))
    from inferd.host import serve_command

    return serve_command.main(args)


def console_main() -> None:
    """The ``inferd`` command: :func:`main`, then the process ends without the interpreter's teardown.

    Once ``serve`` has stopped (models unloaded, frontends closed, logs written), freeing every module
    it loaded serves nobody, and with torch and vLLM loaded it took 3-4 s of CPU. The exit functions
    still run first (log handlers flushed, temporary directories removed, exporters flushed); an
    error exit (``SystemExit``) leaves as usual. ``serve`` first starts over once with the allocator
    asking for huge pages (:mod:`inferd.host.huge_pages`)."""
    if sys.argv[1:2] == ["serve"]:
        start_over_with_huge_pages()
    code = main()
    atexit._run_exitfuncs()  # CPython's own: what Py_Finalize runs before tearing the modules down
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    console_main()
