"""Process calls a rank makes for itself (2 ranks), under torchrun and dtsim run alike.

    torchrun --standalone --nproc_per_node 2 rank_process_calls.py
    dtsim run --nproc-per-node 2 rank_process_calls.py
    dtsim run --meta --nproc-per-node 2 rank_process_calls.py      the same lines: object collectives carry values

- Signal handlers: rank 0 sets SIGUSR1 to a function of its own, rank 1 to SIG_IGN; each reads back its own, and
  what the first call returned (the process's default).
- Object collectives: all_gather_object and broadcast_object_list of small dicts.
- monitored_barrier on the Gloo group the script asked for.
Rank 0 prints what every rank saw (gathered), so the lines do not depend on how the launchers interleave output.
"""
import datetime
import signal

import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


def on_usr1(signum, frame):
    pass


def name(handler):
    if handler is on_usr1:
        return "own-function"
    return {signal.SIG_DFL: "SIG_DFL", signal.SIG_IGN: "SIG_IGN", None: "None"}.get(handler, repr(handler))


previous = signal.signal(signal.SIGUSR1, on_usr1 if rank == 0 else signal.SIG_IGN)
dist.barrier()  # the other rank sets its own in between
seen = {"rank": rank, "previous": name(previous), "now": name(signal.getsignal(signal.SIGUSR1)),
        "term": name(signal.getsignal(signal.SIGTERM))}
gathered = [None] * world
dist.all_gather_object(gathered, seen)
box = [{"from": rank, "payload": list(range(rank + 3))}]
dist.broadcast_object_list(box, src=1)
dist.monitored_barrier(timeout=datetime.timedelta(seconds=60))
boxes = [None] * world
dist.all_gather_object(boxes, box[0])
if rank == 0:
    for s in gathered:
        print(f"result signal rank {s['rank']} previous {s['previous']} now {s['now']} sigterm {s['term']}")
    for r, b in enumerate(boxes):
        print(f"result broadcast_object_list on rank {r}: from {b['from']} payload {b['payload']}")
    print("result monitored_barrier passed")
dist.destroy_process_group()
if rank == 0:
    print("done")
