"""Count the ATen ops of torchtitan's eager RMSNorm (``norm_type = "rmsnorm"``) and complex RoPE,
forward and backward, and the bytes each reads and writes, with torch's dispatch mode on CPU
(each op that is not a view is one kernel on a GPU). Run: ``python
measurements/torchtitan/eager_ops.py`` (torch 2.13 gave the table in eager_kernels.md, which
sim/compute/torchtitan_ops.py encodes)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

VIEWS = {"view", "_unsafe_view", "reshape", "expand", "transpose", "view_as_complex",
         "view_as_real", "unsqueeze", "slice", "detach", "alias", "_conj"}  # fmt: skip


class Count(TorchDispatchMode):
    """Records ``(op, bytes read, bytes written)`` of every ATen op dispatched."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name not in VIEWS:
            ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
            outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
            rd = sum(a.numel() * a.element_size() for a in ins)
            self.rows.append((name, rd, sum(o.numel() * o.element_size() for o in outs)))
        return out


def show(title: str, rows: list[tuple[str, int, int]], e: int) -> None:
    print(f"{title}: {len(rows)} kernels, {sum(r + w for _, r, w in rows) / e:.3f} bytes/E")
    for n, r, w in rows:
        print(f"  {n:12s} read {r / e:6.3f} E  write {w / e:6.3f} E")


def rms_norm() -> None:
    t, h = 64, 4096  # torchtitan@ba2469780 torchtitan/models/norms.py 77-101
    w = torch.ones(h, dtype=torch.bfloat16, requires_grad=True)  # FSDP2 param_dtype bf16
    x = torch.randn(t, h, dtype=torch.bfloat16, requires_grad=True)
    with Count() as c:
        xf = x.float()
        y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * w
    show("RMSNorm forward (E = t h)", c.rows, t * h)
    g = torch.randn_like(y)
    with Count() as c:
        y.backward(g)
    show("RMSNorm backward", c.rows, t * h)


def rope() -> None:
    b, s, hq, hk, hd = 1, 64, 32, 8, 128  # models/llama3/model/model.py@238fa9953e 141-169
    fc = torch.polar(torch.ones(s, hd // 2), torch.randn(s, hd // 2))
    xq = torch.randn(b, s, hq, hd, dtype=torch.bfloat16, requires_grad=True)
    xk = torch.randn(b, s, hk, hd, dtype=torch.bfloat16, requires_grad=True)
    with Count() as c:
        xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        f = fc[0:s].view(1, s, 1, hd // 2)
        q = torch.view_as_real(xq_ * f).flatten(3).type_as(xq)
        k = torch.view_as_real(xk_ * f).flatten(3).type_as(xk)
    show("RoPE forward (E = query elements; keys 1/4 of them)", c.rows, xq.numel())
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    with Count() as c:
        torch.autograd.backward([q, k], [gq, gk])
    show("RoPE backward", c.rows, xq.numel())


if __name__ == "__main__":
    rms_norm()
    rope()
