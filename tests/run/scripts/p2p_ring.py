"""Point to point as pipelines and rings use it: isend/irecv around a ring, batch_isend_irecv, and a receive from any
source; rank 0 prints what arrived (the values are the senders' ranks, so the right answer is known)."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
right, left = (rank + 1) % world, (rank - 1) % world
got = torch.zeros(3)
recv = dist.irecv(got, src=left)
send = dist.isend(torch.full((3,), float(rank)), dst=right)
recv.wait()
send.wait()
ops = [dist.P2POp(dist.isend, torch.full((2,), 10.0 + rank), right),
       dist.P2POp(dist.irecv, batch := torch.zeros(2), left)]
for work in dist.batch_isend_irecv(ops):
    work.wait()
if rank == 0:
    anywhere = torch.zeros(1)
    sources = sorted(dist.recv(anywhere) for _ in range(world - 1))
else:
    dist.send(torch.ones(1), dst=0)
dist.barrier()
if rank == 0:
    print(f"result ring {got.tolist()} batch {batch.tolist()} any-source {sources}")
    print("done")
dist.destroy_process_group()
