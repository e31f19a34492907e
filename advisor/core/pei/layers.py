"""Layer -> kernels -> forward and backward time (Pei et al. 2019, eq. 2-5).

A layer's forward (backward) time is the sum of its kernels' times, run one after the other
(eq. 4, 5). Convolutions have two implementations, im2col GEMM and FFT (stride 1 only); the
library picks the faster, and so does the model, per pass. What each layer launches:

- conv: forward  GEMM [S*Ho*Wo x C*kh*kw] . [C*kh*kw x F] (implicit im2col);
        backward data gradient GEMM [S*Ho*Wo x F] . [F x C*kh*kw] (skipped for the first layer
        with weights: nobody needs the gradient of the images), weight gradient GEMM
        [C*kh*kw x S*Ho*Wo] . [S*Ho*Wo x F], bias gradient (a reduction over dY);
        FFT: transform inputs and filters, S x F complex products per frequency (4 real GEMMs),
        inverse transform; each backward GEMM has its FFT counterpart.
- fc:   the same with a 1x1 "image" (the paper treats FC as a convolution whose filter covers the map).
- pool: reads X, writes Y (kh*kw operations per output); backward reads X and dY, writes dX.
- bn:   training-mode batch norm: statistics pass + normalise pass (reads X twice, writes Y);
        backward reads X and dY twice and writes dX (TensorFlow's fused kernels).
- relu: reads X, writes Y; backward reads Y and dY, writes dX.
- add:  residual sum, reads two inputs and writes one; backward sums the two gradient paths.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.core.pei.kernels import Kernel, KernelTime, elementwise, fft, fft_size, gemm, kernel_time
from advisor.core.spec import GpuSpec, Layer


@dataclass(frozen=True)
class PassTime:
    """One pass (forward or backward) of one layer: the kernels of the chosen implementation."""

    algorithm: str  # "gemm", "fft" or "elementwise" (for conv: the faster of gemm and fft)
    kernels: tuple[KernelTime, ...]

    @property
    def seconds(self) -> float:
        return sum(k.seconds for k in self.kernels)


@dataclass(frozen=True)
class LayerTime:
    name: str
    layer: Layer
    forward: PassTime
    backward: PassTime
    gradient_bytes: int  # the layer's parameters, in bytes


def _fastest(options: dict[str, list[Kernel]], gpu: GpuSpec, dop: float, memory_floor: bool) -> PassTime:
    passes = [PassTime(name, tuple(kernel_time(k, gpu, dop, memory_floor=memory_floor) for k in kernels))
              for name, kernels in options.items() if kernels]
    return min(passes, key=lambda p: p.seconds)


def _conv_kernels(layer: Layer, name: str, batch: int, width: int, gpu: GpuSpec, dop: float,
                  needs_dx: bool) -> tuple[dict[str, list[Kernel]], dict[str, list[Kernel]]]:
    s, c, f = batch, layer.in_channels, layer.outputs
    if layer.type == "fc":
        c = layer.in_channels * layer.height * layer.width
        kh = kw = 1
        ho = wo = 1
    else:
        kh, kw = layer.filter_hw
        ho, wo = layer.output_hw
    rows, depth = s * ho * wo, c * kh * kw
    x, w, y = s * c * layer.height * layer.width if layer.type == "conv" else s * c, depth * f, rows * f
    fwd: dict[str, list[Kernel]] = {"gemm": [gemm(f"{name}/fwd", rows, f, depth, width, gpu, dop, dram_values=x + w + y)]}
    grads = [gemm(f"{name}/wgrad", depth, f, rows, width, gpu, dop, dram_values=x + y + w),
             elementwise(f"{name}/bgrad", s * ho * wo * f, 1, 0, 1, width)]
    dgrad = gemm(f"{name}/dgrad", rows, depth, f, width, gpu, dop, dram_values=y + w + x)
    bwd_gemm = ([dgrad] if needs_dx else []) + grads
    bwd: dict[str, list[Kernel]] = {"gemm": bwd_gemm}
    if layer.type == "conv" and layer.stride_hw == (1, 1) and (kh, kw) != (1, 1):
        ph, pw = layer.pad_hw
        n_h, n_w = fft_size(layer.height + 2 * ph), fft_size(layer.width + 2 * pw)
        freq = n_h * n_w  # complex frequencies, as in [26] (Hermitian symmetry not exploited)
        spectrum = 2 * freq  # real values of one transformed map
        x_hat = fft(f"{name}/fft-x", s * c, n_h, n_w, layer.height * layer.width, spectrum, width)
        w_hat = fft(f"{name}/fft-w", c * f, n_h, n_w, kh * kw, spectrum, width)
        dy_hat = fft(f"{name}/fft-dy", s * f, n_h, n_w, ho * wo, spectrum, width)
        fwd["fft"] = [x_hat, w_hat, gemm(f"{name}/fwd-cgemm", s, f, c, width, gpu, dop, batch=4 * freq),
                      fft(f"{name}/ifft-y", s * f, n_h, n_w, spectrum, ho * wo, width)]
        fft_bwd = [dy_hat, x_hat, gemm(f"{name}/wgrad-cgemm", c, f, s, width, gpu, dop, batch=4 * freq),
                   fft(f"{name}/ifft-dw", c * f, n_h, n_w, spectrum, kh * kw, width), grads[1]]
        if needs_dx:
            fft_bwd += [w_hat, gemm(f"{name}/dgrad-cgemm", s, c, f, width, gpu, dop, batch=4 * freq),
                        fft(f"{name}/ifft-dx", s * c, n_h, n_w, spectrum, layer.height * layer.width, width)]
        bwd["fft"] = fft_bwd
    return fwd, bwd


def layer_time(layer: Layer, index: int, batch: int, gpu: GpuSpec, dop: float, data_width_bits: int,
               needs_dx: bool = True, has_backward: bool = True, memory_floor: bool = True) -> LayerTime:
    """Forward and backward time of ``layer`` (the ``index``-th) at per-GPU ``batch``.

    ``needs_dx`` is False for the first layer with weights (no gradient of the input is computed);
    ``has_backward`` is False for layers before it (nothing to differentiate).
    """
    width = (layer.data_width or data_width_bits) // 8 or 1
    name = layer.name or f"{layer.type}{index}"
    in_values = batch * layer.in_channels * layer.height * layer.width
    ho, wo = layer.output_hw
    out_values = batch * layer.outputs * ho * wo
    fwd: dict[str, list[Kernel]]
    bwd: dict[str, list[Kernel]]
    if layer.type in ("conv", "fc"):
        fwd, bwd = _conv_kernels(layer, name, batch, width, gpu, dop, needs_dx)
    elif layer.type == "pool":
        kh, kw = layer.filter_hw
        fwd = {"elementwise": [elementwise(f"{name}/fwd", out_values, in_values / out_values, 1, kh * kw, width)]}
        bwd = {"elementwise": [elementwise(f"{name}/bwd", in_values, 1 + out_values / in_values, 1, kh * kw, width)]}
    elif layer.type == "bn":
        fwd = {"elementwise": [elementwise(f"{name}/stats", in_values, 1, 0, 2, width),
                               elementwise(f"{name}/fwd", in_values, 1, 1, 2, width)]}
        bwd = {"elementwise": [elementwise(f"{name}/bwd-stats", in_values, 2, 0, 2, width),
                               elementwise(f"{name}/bwd", in_values, 2, 1, 4, width)]}
    elif layer.type == "relu":
        fwd = {"elementwise": [elementwise(f"{name}/fwd", in_values, 1, 1, 1, width)]}
        bwd = {"elementwise": [elementwise(f"{name}/bwd", in_values, 2, 1, 1, width)]}
    else:  # add
        fwd = {"elementwise": [elementwise(f"{name}/fwd", in_values, 2, 1, 1, width)]}
        bwd = {"elementwise": [elementwise(f"{name}/bwd", in_values, 2, 1, 1, width)]}
    forward = _fastest(fwd, gpu, dop, memory_floor)
    backward = _fastest(bwd, gpu, dop, memory_floor) if has_backward else PassTime("none", ())
    return LayerTime(name, layer, forward, backward, layer.parameters * width)


def network_times(layers: tuple[Layer, ...], batch: int, gpu: GpuSpec, dop: float, data_width_bits: int,
                  memory_floor: bool = True) -> list[LayerTime]:
    """Every layer's times, in network order (eq. 2, 3 sum them)."""
    first = next((i for i, layer in enumerate(layers) if layer.parameters > 0), len(layers))
    return [layer_time(layer, i, batch, gpu, dop, data_width_bits, needs_dx=i > first, has_backward=i >= first,
                       memory_floor=memory_floor)
            for i, layer in enumerate(layers)]
