"""Profile a model for a GPU you do not have: fake tensors, counted FLOPs and bytes, a roofline.

``sim profile --model FILE.py:FUNC --for-gpu H100`` builds the model and its sample under
``torch._subclasses.fake_tensor.FakeTensorMode`` (tensors with shapes and dtypes but no data:
no memory, no compute, any model size) and, for every layer of the chain
(:mod:`backends.torch.models.layer_chain`):

* runs the forward and then the backward, recording every aten operator with
  :class:`OpCounter` (a ``TorchDispatchMode``): its FLOPs from
  ``torch.utils.flop_counter``'s formulas (the ones ``FlopCounterMode`` uses) and the bytes it
  reads and writes (its tensor inputs and outputs; views move nothing);
* ``fwd_s`` / ``bwd_s``: the sum over operators of :func:`op_time_s` on the target GPU;
* ``flops``: forward FLOPs, by the formulas ``torch.utils.flop_counter.FlopCounterMode`` uses
  (its ``flop_registry``; plus CPU flash attention, which it lacks);
* ``act_bytes``: bytes saved for backward (``torch.autograd.graph.saved_tensors_hooks``, once per
  storage, parameters excluded), as the real profiler counts them;
* ``param_bytes`` and ``out_bytes`` from the shapes (0 for the last layer, which includes the
  loss);
* ``fwd_ops`` / ``bwd_ops``: the ops the host issues for the forward and the backward,
  counted by :func:`backends.torch.profile.op_count.layer_ops` under fake tensors, exactly as the
  real profiler counts them (:mod:`sim.hardware.host_ops`); ``fwd_modules`` / ``fwd_functions``: the
  forward's ``nn.Module`` calls and ``autograd.Function`` applies
  (:func:`backends.torch.profile.op_count.layer_calls`), the Python the host runs around those ops.

:func:`op_time_s` is a roofline at the preset's peak (``gpu.peak_flops``: dense fp16/bf16 tensor
peak; ``gpu.hbm_bandwidth``; hardware.md §1). It is the one place where the compute model
(``sim.compute``, being built) will plug in; until then it is an upper bound on speed: real
kernels reach about 60-75 % of peak on large GEMMs (hardware.md §1) and launch overheads are
ignored. The trace's provenance says so.
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from backends.torch.models.layer_chain import chain_layers, run_layer
from backends.torch.models.shared_params import counted_once
from backends.torch.models.user import build_user_model, compute_loss, load_loss
from backends.torch.models.user_spec import UserModelSpec
from backends.torch.profile.flops import cpu_attention_flops
from backends.torch.profile.op_count import layer_calls, layer_ops
from backends.torch.profile.saved_bytes import tensor_bytes
from sim.errors import InputError
from sim.hardware.gpu_names import preset_gpus, read_gpu
from sim.hardware.loader import load_hardware
from sim.trace.native import write_trace
from sim.trace.schema import LayerProfile, Trace

ROOFLINE_NOTE = (
    "times: roofline per aten operator, max(flops / peak_flops, bytes / "
    "hbm_bandwidth), at the preset's dense fp16/bf16 peak and HBM bandwidth "
    "(hardware.md §1); an upper bound on speed (real GEMMs reach ~60-75 % of peak, "
    "launch overheads ignored); sim.compute (the compute model) will replace it"
)


def op_time_s(flops: float, nbytes: float, peak_flops: float, hbm_bandwidth_Bps: float) -> float:
    """Seconds one operator takes on a GPU: the roofline ``max(flops / peak, bytes / bw)``.

    The single point where the compute model plugs in (``sim.compute``, not yet in the tree).

    Args:
        flops: floating-point operations of the operator.
        nbytes: bytes it reads and writes in HBM.
        peak_flops: the GPU's dense peak in FLOP/s (hardware preset ``gpu.peak_flops``).
        hbm_bandwidth_Bps: HBM bandwidth in bytes/s (preset ``gpu.hbm_bandwidth``).

    Example:
        >>> op_time_s(2e12, 1e9, 1e15, 1e12)  # 2 ms compute vs 1 ms memory
        0.002
    """
    return max(flops / peak_flops, nbytes / hbm_bandwidth_Bps)


def _is_view(func: Any) -> bool:
    returns = func._schema.returns
    return bool(returns) and returns[0].alias_info is not None


class OpCounter(TorchDispatchMode):
    """Counts every aten operator's FLOPs and HBM bytes, and their roofline time.

    Attributes:
        flops: FLOPs of the operators seen.
        nbytes: bytes read and written: tensor inputs + outputs of ``aten`` operators; views
            and non-aten operators (``prim.device``) count 0, factories (``*_like``,
            ``empty*``, ``new_*``) their outputs only.
        time_s: sum of :func:`op_time_s` over the operators.
    """

    def __init__(self, peak_flops: float, hbm_bandwidth_Bps: float):
        super().__init__()
        self.peak, self.bw = peak_flops, hbm_bandwidth_Bps
        self.flops = self.nbytes = self.time_s = 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        flops = cpu_attention_flops(packet, args)
        if flops is None:
            flops = (
                float(flop_registry[packet](*args, **kwargs, out_val=out))
                if packet in flop_registry
                else 0.0
            )
        nbytes = 0.0
        if func.namespace == "aten" and not _is_view(func):
            name = packet.__name__
            reads = not (name.endswith("_like") or name.startswith(("empty", "new_")))
            leaves = (tree_flatten((args, kwargs))[0] if reads else []) + tree_flatten(out)[0]
            nbytes = float(tensor_bytes(t for t in leaves if isinstance(t, torch.Tensor)))
        self.flops += flops
        self.nbytes += nbytes
        self.time_s += op_time_s(flops, nbytes, self.peak, self.bw)
        return out


class FakeSavedBytes:
    """Bytes saved for backward under fake tensors: once per storage, parameters excluded."""

    def __init__(self, exclude: list[torch.Tensor]):
        self.excluded = {self._key(p) for p in exclude}
        self.seen: set[int] = set()
        self.nbytes = 0

    @staticmethod
    def _key(t: torch.Tensor) -> int:
        return t.untyped_storage()._cdata

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = self._key(t)
        if key not in self.excluded and key not in self.seen:
            self.seen.add(key)
            self.nbytes += t.untyped_storage().nbytes()
        return t

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)


def resolve_gpu(name: str) -> tuple[str, Any]:
    """The hardware a ``--for-gpu`` name means: a preset or hardware YAML, or a GPU name as
    :func:`sim.hardware.gpu_names.read_gpu` reads it (``H100`` is the 80 GB ``dgx-h100``'s,
    not the 96 GB HBM2e part's; ``A100 80GB``, ``GH200``).

    Returns:
        ``(preset or file, sim.hardware.parts.GPU)``.

    Raises:
        InputError: no preset matches, several GPU models do, or a PCIe card (naming
            ``--for-gpu``, every preset and every GPU model).
    """
    if name.endswith((".yaml", ".yml")):
        return name, load_hardware(name, field="--for-gpu").gpu(0)
    reading = read_gpu(name)
    if reading.preset:
        return reading.preset, load_hardware(reading.preset, field="--for-gpu").gpu(0)
    models = preset_gpus()
    what = {"unknown": "matches no preset", "pcie": f"is {reading.reason}"}.get(
        reading.refused, reading.reason
    )
    raise InputError(
        f"{name!r} {what}; name a preset ({', '.join(models)}) or one of "
        f"{', '.join(sorted(set(models.values())))}",
        field="--for-gpu",
    )


def _fake_layer(
    name: str, fn: Any, params: list, x: torch.Tensor, last: bool, peak: float, bw: float
) -> LayerProfile:
    x = x.detach().requires_grad_(x.is_floating_point())
    saved = FakeSavedBytes(params)
    fwd = OpCounter(peak, bw)
    with saved.hooks(), fwd:
        y = fn(x)
    bwd = OpCounter(peak, bw)
    if y.requires_grad:
        grad = None if y.dim() == 0 else torch.ones_like(y)
        with bwd:
            torch.autograd.backward(y, grad)
    fwd_ops, bwd_ops = layer_ops(fn, x)  # as the real profiler counts, gradients now held
    modules, functions = layer_calls(fn, x)
    return LayerProfile(
        name=name,
        fwd_s=fwd.time_s,
        bwd_s=bwd.time_s,
        param_bytes=float(tensor_bytes(params)),
        act_bytes=float(saved.nbytes),
        out_bytes=0.0 if last else float(tensor_bytes([y])),
        flops=fwd.flops,
        fwd_ops=float(fwd_ops),
        bwd_ops=float(bwd_ops),
        fwd_modules=float(modules),
        fwd_functions=float(functions),
    )


def fake_profile_user_model(
    source: str,
    *,
    gpu_name: str,
    layers: tuple[str, ...] | None = None,
    loss: str | None = None,
    microbatch_size: int | None = None,
    dtype: str = "bf16",
    seed: int = 0,
    name: str = "model",
    kwargs: dict[str, Any] | None = None,
    path: Any = None,
) -> Trace:
    """A trace of a user's model for the GPU ``gpu_name``, computed under fake tensors.

    Args:
        source: ``FILE.py:FUNC`` or ``package.module:FUNC`` (see :mod:`backends.torch.models.user`).
        gpu_name: a hardware preset, a hardware YAML, or a GPU model substring (``H100``).
        layers, loss, microbatch_size, seed, name, kwargs: as
            :func:`backends.torch.profile.user.profile_user_model`.
        dtype: ``bf16`` or ``fp16`` (the presets give the fp16/bf16 tensor peak only).
        path: write ``path.csv`` + ``path.yaml`` there.

    Returns:
        The trace (``device``: the GPU model); ``provenance.model`` is the replayable spec.

    Raises:
        InputError: a bad model, layer, sample or loss (as the real profiler), an unknown GPU,
            an ``fp32`` dtype, or an operator fake tensors cannot run.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    if dtype not in ("bf16", "fp16"):
        raise InputError(
            f"--for-gpu models the fp16/bf16 tensor peak of the presets; {dtype} "
            "has no peak there yet: use --dtype bf16 or fp16",
            field="--dtype",
        )
    preset, gpu = resolve_gpu(gpu_name)
    spec = UserModelSpec.draft(source, loss=loss, seed=seed, kwargs=kwargs, name=name)
    with FakeTensorMode(allow_non_fake_inputs=True):
        um = build_user_model(spec, microbatch_size=microbatch_size, dtype=dtype)
        chain = chain_layers(um.model, layers)
        out = _fake_chain(spec, um, chain, gpu.peak_flops, gpu.hbm_bandwidth_Bps)
    spec = spec.with_chain(tuple(n for n, _ in chain), um.takes_microbatch_size, um.microbatch_size)
    prov = {
        "source": "backends.torch.profile.fake.fake_profile_user_model",
        "command": " ".join(sys.argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "torch": str(torch.__version__),
        "method": "FakeTensorMode analysis, no device run",
        "gpu": {
            "model": gpu.model,
            "preset": preset,
            "peak_flops": gpu.peak_flops,
            "hbm_bandwidth_Bps": gpu.hbm_bandwidth_Bps,
        },
        "compute_model": "roofline (backends.torch.profile.fake.op_time_s); sim.compute not "
        "used yet",
        "microbatch_size": um.microbatch_size,
        "dtype": dtype,
        "model": spec.to_dict(),
        "seed": seed,
        "notes": ROOFLINE_NOTE + "; flops: FlopCounterMode's formulas (forward); act_bytes: "
        "saved_tensors_hooks under fake tensors (per storage, parameters excluded); "
        "the last layer includes the loss"
        + ("" if loss else " (stand-in loss mean(output^2), an assumption)"),
    }
    layers_once, shared = counted_once(out, [m for _, m in chain])
    trace = Trace(
        name=name,
        layers=layers_once,
        shared=shared,
        microbatch_size=um.microbatch_size,
        dtype=dtype,
        device=gpu.model,
        provenance=prov,
    )
    if path is not None:
        write_trace(trace, path)
    return trace


def _fake_chain(spec: UserModelSpec, um: Any, chain: list, peak: float, bw: float) -> list:
    loss_fn = load_loss(spec)
    x, rest = um.sample[0], um.sample[1:]
    out = []
    for i, (name, layer) in enumerate(chain):
        last = i == len(chain) - 1
        run_layer(
            i, name, layer, (x, *rest) if i == 0 else (x,), "--model" if i == 0 else "--layers"
        )  # a clear error before the analysis

        def fn(h: torch.Tensor, layer=layer, i=i, last=last) -> torch.Tensor:
            y = layer(h, *rest) if i == 0 else layer(h)
            return compute_loss(loss_fn, y, um.target, spec.loss) if last else y

        try:
            out.append(_fake_layer(name, fn, list(layer.parameters()), x, last, peak, bw))
        except InputError:
            raise
        except Exception as exc:
            raise InputError(
                f"layer {i} ({name!r}) cannot be analysed under fake tensors: "
                f"{type(exc).__name__}: {exc}",
                field="--for-gpu",
            ) from None
        with torch.no_grad():
            x = layer(x, *rest) if i == 0 else layer(x)
    return out
