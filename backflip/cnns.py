"""Which CNN reads a frame of a given size: one table for the policy's encoders (`nets.encoder`)
and the reward model's (`prefs/reward_model.py`), checked before a run is created.

Each CNN shrinks a frame by its kernels and strides; below its smallest frame it would fail in
PyTorch with "Kernel size can't be greater than actual input size". `auto` picks the large CNN
where it fits and the small one (3x3 convolutions at full resolution, what MinAtar's 10x10 grids
need) elsewhere; a CNN named explicitly on a frame too small for it is refused in one line. Plain
data: the launcher checks a config with it without importing torch.
"""

from __future__ import annotations

from backflip.errors import UserError

# the smallest height and width each CNN reads (its receptive field at the output)
POLICY_CNN_MIN = {
    "nature": 36,  # kernels 8, 4, 3 with strides 4, 2, 1 (Mnih et al. 2015): 84x84 frames
    "keypoints": 13,  # a 7x7 stride-3 layer, then 3x3 at its resolution: >= 3x3 keypoint maps
    # two 3x3 convolutions without padding (the second with stride 2 above 16 pixels): a 3x3
    # frame left the second a 1x1 input ("Kernel size can't be greater than actual input size")
    "small": 5,
}
REWARD_CNN_MIN = {
    "paper": 43,  # kernels 7, 5, 3, 3 with strides 3, 2, 1, 1 (Christiano et al. 2017)
    "keypoints": 13,
    "small": 5,
}
# the smallest frame any CNN here reads: a 2-D or 3-D Box smaller than this is a vector to
# flatten (`envs.wrappers.observation_layout`), not a frame
SMALLEST_FRAME = max(POLICY_CNN_MIN["small"], REWARD_CNN_MIN["small"])


def pick_cnn(
    choice: str, frame: tuple[int, ...], table: dict[str, int], large: str, what: str
) -> str:
    """The CNN that reads (C, H, W) frames of `frame`'s size: `choice`, or for `auto` the
    `large` one where it fits and `small` elsewhere. Raises a UserError naming `what` setting
    when the chosen CNN is larger than the frame."""
    height, width = frame[-2], frame[-1]
    side = min(height, width)
    if choice == "auto":
        return large if side >= table[large] else "small"
    if side < table[choice]:
        fits = ", ".join(name for name, need in table.items() if side >= need)
        raise UserError(
            f"{what}={choice} needs frames of at least {table[choice]}x{table[choice]} pixels; "
            f"this env's are {height}x{width}: use {what}=auto (or {fits})"
        )
    return choice
