"""Score label sequences against a batch of frame-wise log-probabilities with the CTC loss
(rudnn.ctc) on the runtime you pick, take its gradient, and check both: the loss against
a brute-force sum over every alignment of a tiny problem, the gradient against finite
differences of the loss.

Run:  python examples/ctc.py [--runtime cpu|opencl|cuda] [--dtype f32|f16|bf16]
"""
import argparse
import itertools

import numpy as np

import kerneldsl as kd
import rudnn.ctc as ctc


def log_softmax(z):
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def collapse(path, blank):
    """An alignment's label sequence: merge repeats, then drop blanks."""
    out = [k for i, k in enumerate(path) if i == 0 or k != path[i - 1]]
    return [k for k in out if k != blank]


def brute_force_nll(lp, labels, blank):
    """-log Σ over every alignment of T frames that collapses to `labels` (C^T paths)."""
    T, C = lp.shape
    total = sum(np.exp(sum(lp[t, k] for t, k in enumerate(path)))
                for path in itertools.product(range(C), repeat=T) if collapse(path, blank) == list(labels))
    return -np.log(total)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtime", default=None, help="cpu, opencl or cuda (default: $KERNELDSL_RUNTIME or cpu)")
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16"])
    args = p.parse_args()
    rt = kd.runtime(args.runtime)
    print("runtime:", rt.name, "-", rt.capabilities.device_name)

    rng = np.random.default_rng(0)
    T, N, C, blank = 6, 3, 4, 0
    x = rng.standard_normal((T, N, C))
    lp = log_softmax(x).astype(np.float32)                                  # frame-wise log-probabilities
    targets = np.array([[1, 2, 2], [3, 1, 0], [2, 0, 0]], np.int32)          # padded [N, S]
    target_lengths = np.array([3, 2, 1], np.int32)   # sample 0 repeats a label: a blank must separate them
    input_lengths = np.array([6, 5, 4], np.int32)

    log_probs = rt.tensor(lp, dtype=args.dtype)
    t_args = (log_probs, rt.tensor(targets), rt.tensor(input_lengths), rt.tensor(target_lengths))
    nll = ctc.ctc_loss(*t_args, blank=blank, reduction="none")                  # [N], in log_probs' dtype
    seen = log_probs.numpy().astype(np.float64)                                 # what the kernels saw
    want = [brute_force_nll(seen[:input_lengths[n], n], targets[n, :target_lengths[n]], blank) for n in range(N)]
    tol = {"f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}[args.dtype]
    for n in range(N):
        print(f"sample {n}: loss {float(nll.numpy()[n]):.5f}, brute force over {C}^{input_lengths[n]} paths "
              f"{want[n]:.5f}")
    assert np.allclose(nll.numpy().astype(np.float64), want, rtol=tol)

    mean = ctc.ctc_loss(*t_args, blank=blank)            # Σ loss_n / target_length_n, / N
    grad = ctc.ctc_loss_backward(*t_args, 1.0, blank=blank)   # d mean / d log_probs, as torch's autograd
    # torch's gradient (its exp(log_probs)·Σgrad term) is the one w.r.t. the logits z that
    # log_probs = log_softmax(z) came from: check it along a random direction of z (z = lp here)
    d = rng.standard_normal((T, N, C))
    eps = 1e-2

    def loss_at(z):
        return float(ctc.ctc_loss(rt.tensor(log_softmax(z).astype(np.float32)), *t_args[1:], blank=blank).numpy())

    up, down = loss_at(lp + eps * d), loss_at(lp - eps * d)
    numeric = (up - down) / (2 * eps)
    analytic = float((grad.numpy().astype(np.float64) * d).sum())
    print(f"mean loss {float(mean.numpy()):.5f}; directional derivative {analytic:.5f}, "
          f"finite differences {numeric:.5f}")
    assert abs(analytic - numeric) < 2e-3 + 0.05 * abs(numeric) * (args.dtype != "f32")
    alpha, beta, _ = ctc.ctc_alpha_beta(*t_args, blank=blank)
    print("alpha, beta:", alpha.shape, alpha.dtype.name, "(log space, -inf where unreachable)")
    print("ok")


if __name__ == "__main__":
    main()
