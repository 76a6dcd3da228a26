"""A small transformer block whose normalisations and softmax are rudnn operators, trained
with torch.optim on the CPU; then the fused rudnn attention serves the trained block.

rudnn.torch registers every operator as a PyTorch custom op (torch.ops.rudnn.*): the
tensors pass zero-copy through DLPack, autograd runs rudnn's backward kernels (RMSNorm,
LayerNorm here), and torch.compile(fullgraph=True) traces them. Needs PyTorch:
pip install 'rudnn[oracle]'.
"""
import math

try:
    import torch
except ImportError:
    raise SystemExit("examples/torch_model.py needs PyTorch: pip install 'rudnn[oracle]'") from None

import rudnn.torch as R


class Block(torch.nn.Module):
    """Pre-norm causal self-attention and an MLP, with rudnn's rms_norm, layer_norm and softmax."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.Parameter(torch.ones(dim))
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2_weight = torch.nn.Parameter(torch.ones(dim))
        self.norm2_bias = torch.nn.Parameter(torch.zeros(dim))
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def attention_inputs(self, x):
        B, S, D = x.shape
        q, k, v = self.qkv(R.rms_norm(x, self.norm1)).chunk(3, dim=-1)
        return [t.reshape(B, S, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v)]

    def forward(self, x, fused_attention: bool = False):
        q, k, v = self.attention_inputs(x)
        if fused_attention:  # inference: rudnn's one-kernel attention (it has no backward)
            a = R.attention(q, k, v, is_causal=True, strategy="FlashUnit")
        else:                # training: scores in torch, softmax by rudnn (differentiable)
            scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
            causal = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
            a = R.softmax_last_axis(scores.masked_fill(causal, float("-inf"))) @ v
        x = x + self.proj(a.transpose(1, 2).flatten(2))
        return x + self.mlp(R.layer_norm(x, self.norm2_weight, self.norm2_bias))


def main():
    torch.manual_seed(0)
    B, S, D, H = 8, 12, 32, 4
    teacher, student = Block(D, H), Block(D, H)
    x = torch.randn(B, S, D)
    with torch.no_grad():
        target = teacher(x)

    step = torch.compile(student, fullgraph=True, backend="aot_eager")  # no graph break through rudnn ops
    optim = torch.optim.Adam(student.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.mse_loss(step(x), target)
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(loss.item())
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} in {len(losses)} steps")
    assert losses[-1] < 0.5 * losses[0], losses

    with torch.no_grad():  # the fused attention kernel gives the trained block's outputs
        eager, fused = student(x), student(x, fused_attention=True)
    torch.testing.assert_close(fused, eager, atol=1e-4, rtol=1e-4)
    print("fused rudnn attention matches the trained block")
    print("ok")


if __name__ == "__main__":
    main()
