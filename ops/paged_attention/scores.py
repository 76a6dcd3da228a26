"""Constants of the softmax: logits are kept in log2 units (the kernels use exp2)."""
LOG2E = 1.4426950408889634
