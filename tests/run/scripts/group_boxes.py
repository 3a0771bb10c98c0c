"""All-reduces that alternate between the rank's dp group and the world, many times over: c10d's dispatcher ops hand
each call's group as a new boxed object, and a freed box's address comes back for the next call's box, whichever group
it holds. The recording must name each collective's own group (tests/run/test_record.py).

    dtsim record -o real.json -- torchrun --standalone --nproc_per_node 4 group_boxes.py
"""
import torch
import torch.distributed as dist

CALLS = 200


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    # Every rank creates every group (new_group is collective); a rank keeps its own.
    dp = [dist.new_group([0, 2]), dist.new_group([1, 3])][rank % 2]
    for i in range(CALLS):
        t = torch.ones(2)
        dist.all_reduce(t, group=dp if i % 2 else None)
        assert t[0].item() == (2 if i % 2 else 4)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
