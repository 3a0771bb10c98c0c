"""`python -m dtsim run|record ...`: the same commands as `dtsim run|record ...` (the C++ CLI hands both to this
module)."""

import sys


def _main(argv) -> int:
    if argv and argv[0] == "import-fr":
        from .fr_import import main as import_main

        return import_main(argv[1:])
    if argv and argv[0] == "record":
        from .record_command import main as record_main

        return record_main(argv[1:])
    if not argv or argv[0] != "run":
        print("dtsim: error: command: python -m dtsim offers 'run' and 'record' (the other commands are the dtsim "
              "binary's); usage: python -m dtsim run [--nproc-per-node N] SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    from .run import main

    return main(argv[1:])


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
