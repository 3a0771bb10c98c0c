"""`dtsim run`: a user's unmodified torchrun script on the simulated world, every rank a thread of one process.

launcher.py parses torchrun's options and starts the ranks; scheduler.py hands the one running turn from rank to rank
and finds hangs; process_group.py is the `dtsim` c10d backend that computes every collective between the ranks;
emulation.py makes torch.distributed and torch.cuda serve the simulated ranks. docs/run.md describes it for users.
"""

from .launcher import main

__all__ = ["main"]
