"""One mixture-of-experts layer forward on your runtime: route, dispatch, SwiGLU experts, combine.

The same layer is run twice: with softmax top-2 routing through `SwiGluExperts.forward`,
and with DeepSeek-V3 grouped sigmoid routing step by step (plan -> dispatch -> experts ->
combine). Both are checked against a few lines of numpy.

Run:  python examples/moe_layer.py            (KERNELDSL_RUNTIME=cuda / opencl to pick a runtime)
"""
import numpy as np

import kerneldsl as kd
from rudnn import moe


def numpy_layer(x, ids, w, gate, up, down):
    """out[t] = sum_j w[t, j] * down[e] @ (silu(gate[e] @ x[t]) * (up[e] @ x[t])), e = ids[t, j]."""
    out = np.zeros((x.shape[0], down.shape[1]))
    for t in range(x.shape[0]):
        for j, e in enumerate(ids[t]):
            g, u = gate[e] @ x[t], up[e] @ x[t]
            out[t] += w[t, j] * (down[e] @ (g / (1 + np.exp(-g)) * u))
    return out


def main():
    rt = kd.runtime()
    dt = kd.bf16 if kd.bf16 in rt.capabilities.mma_dtypes and rt.capabilities.mma_native else kd.f32
    T, E, H, I = 64, 16, 128, 96                  # tokens, experts, hidden size, expert intermediate size
    rng = np.random.default_rng(0)
    host = {n: (rng.standard_normal(s) / np.sqrt(s[-1])).astype(dt.np)
            for n, s in (("gate", (E, I, H)), ("up", (E, I, H)), ("down", (E, H, I)))}
    x = rng.standard_normal((T, H)).astype(dt.np)
    logits = rng.standard_normal((T, E)).astype(np.float32)
    experts = moe.SwiGluExperts(rt.tensor(host["gate"]), rt.tensor(host["up"]), rt.tensor(host["down"]))
    xt, lt = rt.tensor(x), rt.tensor(logits)
    f64 = {n: a.astype(np.float64) for n, a in host.items()}

    # 1. softmax top-2, the whole layer in one call
    out = experts.forward(xt, lt, moe.RoutingOptions(top_k=2, renormalize=True))
    plan = moe.route(lt, moe.RoutingOptions(top_k=2, renormalize=True))
    ref = numpy_layer(x.astype(np.float64), plan.expert_indices().numpy(), plan.weights().numpy().astype(np.float64),
                      f64["gate"], f64["up"], f64["down"])
    err = np.abs(out.numpy().astype(np.float64) - ref).max() / np.abs(ref).max()
    print(f"{rt.name} {dt.name}: softmax top-2 layer {tuple(out.shape)}, max error {err:.1e} of the output's range")

    # 2. grouped sigmoid routing (8 groups, keep 3, top-4, a bias that steers the choice), step by step
    opts = moe.GroupRoutingOptions(top_k=4, groups=8, selected_groups=3, group_top_two=True, renormalize=True,
                                   scale=2.5)
    bias = rt.tensor((rng.standard_normal(E) * 0.1).astype(np.float32))
    plan = moe.route_sigmoid_grouped(lt, bias, opts)
    dispatched = plan.dispatch(xt)                # T * top_k rows grouped by expert
    counts = np.diff(dispatched.expert_offsets().numpy())
    rows = experts.forward_dispatched_with_strategy(dispatched, moe.GroupedStrategy.Auto)
    out = dispatched.combine(rows)
    ref = numpy_layer(x.astype(np.float64), plan.expert_indices().numpy(), plan.weights().numpy().astype(np.float64),
                      f64["gate"], f64["up"], f64["down"])
    err = np.abs(out.numpy().astype(np.float64) - ref).max() / np.abs(ref).max()
    print(f"grouped sigmoid top-4: rows per expert {counts.tolist()}, max error {err:.1e} of the output's range")
    assert err < (5e-2 if dt is kd.bf16 else 1e-4)
    print("ok")


if __name__ == "__main__":
    main()
