"""One gradient step of the policy's CNNs, channels-last against NCHW (one torch thread).

For each policy CNN of `backflip.nets` on the frames it is picked for (NatureCNN and KeypointCNN
on 4 stacked 84x84 frames, SmallCNN on MinAtar's 10x10x4 grids): the actor-critic's forward pass
on a minibatch of 256, a loss on its logits and values, backward and an Adam step, in the layout
the network uses (`channels_last=True`, the default) and in NCHW. Prints ms per step and the
ratio. A PPO update on MovingDot84 with `cnn=keypoints` (1,024 samples x 20 epochs) is 80 of these.

    python benchmarks/cnn_update_step.py [--repeats 10]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import torch

from backflip.nets import ActorCritic


def step_ms(ac: ActorCritic, x: torch.Tensor, repeats: int) -> float:
    opt = torch.optim.Adam(ac.parameters(), 1e-4)

    def step():
        logits, v = ac(x)
        loss = logits.logsumexp(-1).mean() + v.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()
    t = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - t) / repeats * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| CNN | frames | NCHW ms/step | channels-last ms/step | speed-up |")
    print("|---|---|---|---|---|")
    for cnn, shape in (("nature", (4, 84, 84)), ("keypoints", (4, 84, 84)), ("small", (4, 10, 10))):
        times = {}
        for last in (False, True):
            torch.manual_seed(0)
            ac = ActorCritic(shape, gym.spaces.Discrete(6), cnn=cnn)
            if hasattr(ac.trunk, "channels_last") and not last:
                ac.trunk.channels_last = False
                ac.trunk.net.to(memory_format=torch.contiguous_format)
            elif last and not hasattr(ac.trunk, "channels_last"):
                continue  # SmallCNN: NCHW only (channels-last gained nothing on 10x10 grids)
            x = torch.randint(0, 256, (args.batch, *shape), dtype=torch.uint8)
            times[last] = step_ms(ac, x, args.repeats)
        last = times.get(True)
        print(
            f"| {cnn} | {'x'.join(map(str, shape))} | {times[False]:.0f} | "
            f"{'–' if last is None else f'{last:.0f}'} | "
            f"{'–' if last is None else f'{times[False] / last:.2f}x'} |"
        )


if __name__ == "__main__":
    main()
