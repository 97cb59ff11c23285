"""Entry point: ``python -m kgate``.

Every stage job runs ``python -m kgate`` with the first ``python`` on its PATH. When that interpreter is not
the one kgate was installed into (a node whose ``python`` is another installation, or a link to a virtual
environment's interpreter, which Python then starts outside the environment), an import of one of kgate's own
dependencies fails before any stage code runs. That is an infrastructure error: one line naming the module,
who imported it and the interpreter, exit 2, instead of an import traceback. Target code runs in
subprocesses (gate runs, timing workers, profilers), whose failures are their stages' data; what this process
imports is kgate's dependencies, torch, and a campaign's own reference or input modules, so the line names the
importer rather than guessing which of these it was.
"""

import sys


def missing_module(exc: ModuleNotFoundError) -> str:
    """The one line for a module this interpreter cannot import, naming the module that asked for it."""
    tb, importer = exc.__traceback__, None
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__")
        if name and not name.startswith("importlib") and name != "__main__":
            importer = name
        tb = tb.tb_next
    by = f" (imported by {importer})" if importer else ""
    return (f"kgate: error: {sys.executable} cannot import {exc.name!r}{by}: install it into this interpreter, or "
            "run the stages with the one that has kgate's dependencies (the first 'python' on every job's PATH; "
            "pip install -e <kgate checkout> installs them)")


if __name__ == "__main__":
    try:
        from kgate.cli import main

        code = main()
    except ModuleNotFoundError as exc:
        print(missing_module(exc), file=sys.stderr)
        code = 2
    sys.exit(code)
