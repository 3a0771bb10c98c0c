"""`python -m dtsim run ...`: the same command as `dtsim run ...` (the C++ CLI hands `run` to this module)."""

import sys


def _main(argv) -> int:
    if not argv or argv[0] != "run":
        print("dtsim: error: command: python -m dtsim offers 'run' (the other commands are the dtsim binary's); "
              "usage: python -m dtsim run [--nproc-per-node N] SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    from .run import main

    return main(argv[1:])


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
