"""Pei et al. 2019 Tables 6 and 8 beside what advisor's pei2019 model predicts.

    python3 -m benchmarks.pei_tables            # the shipped model (device-memory floor on)
    python3 -m benchmarks.pei_tables --no-floor # the paper's instruction queue alone

Table 6: forward and forward-backward time of AlexNet (batch 256) and ResNet-50 (batch 32), the
batches of the paper's Fig. 7 (Table 6 does not state its own), on P40, K80 and K40.
Table 8: ResNet-50 on 1, 2 and 4 P40s, PS and NCCL, a global batch of 128 split over the GPUs
(the paper does not state it; see docs/models-pei.md), four independent PCIe 3.0 x16 links at
12 GB/s with 10 us per transfer and a host averaging 10 GB/s.
"""

from __future__ import annotations

import argparse
import time

from advisor.core.pei.iteration import predict_iteration
from advisor.importers.spec_file import example_spec_path, load_spec

TABLE6 = {  # (network, gpu): (forward s, forward-backward s), Pei et al. Table 6
    ("alexnet", "P40"): (0.03494, 0.10996),
    ("alexnet", "K80"): (0.08843, 0.29054),
    ("alexnet", "K40"): (0.0907, 0.2958),
    ("resnet50", "P40"): (0.0331, 0.097),
    ("resnet50", "K80"): (0.087, 0.267),
    ("resnet50", "K40"): (0.0869, 0.2609),
}
TABLE8 = {  # mode: (model's 1-GPU s, speed-up at 2, speed-up at 4), Pei et al. Table 8 "Proposed model"
    "ps": (0.72844, 1.97, 3.84),
    "nccl": (0.72891, 1.95, 3.76),
}
TABLE8_MEASURED = {  # mode: (1-GPU s, 2-GPU s, 4-GPU s), Pei et al. Table 8 "Actual runtime"
    "ps": (0.71388, 0.36984, 0.20364),
    "nccl": (0.71838, 0.37852, 0.21069),
}
TABLE8_BATCH = 128
TABLE8_LINKS = {"mode": "ps", "bandwidth_gbps": 12.0, "count": 4, "latency_us": 10.0, "host_reduce_gbps": 10.0}


def table6(memory_floor: bool = True) -> dict[tuple[str, str], tuple[float, float]]:
    """(network, gpu) -> (forward s, forward-backward s) as the model predicts them."""
    out = {}
    for net in ("alexnet", "resnet50"):
        base = load_spec(example_spec_path(net))
        for gpu in ("P40", "K80", "K40"):
            spec = base.model_copy(update={"gpu": type(base.gpu).model_validate(gpu)})
            it = predict_iteration(spec, 1, memory_floor=memory_floor)
            out[(net, gpu)] = (it.t_forward, it.t_forward + it.t_backward)
    return out


def table8(memory_floor: bool = True, batch: int = TABLE8_BATCH) -> dict[str, tuple[float, float, float]]:
    """mode -> (1-GPU iteration s, speed-up at 2 GPUs, speed-up at 4 GPUs), global batch split."""
    from advisor.core.spec import LinksSpec

    base = load_spec(example_spec_path("resnet50"))
    out = {}
    for mode in ("ps", "nccl"):
        spec = base.model_copy(update={"links": LinksSpec(**{**TABLE8_LINKS, "mode": mode})})
        times = [predict_iteration(spec, w, mode, batch=batch // w, memory_floor=memory_floor).total for w in (1, 2, 4)]
        out[mode] = (times[0], times[0] / times[1], times[0] / times[2])
    return out


def _pct(model: float, paper: float) -> str:
    return f"{(model / paper - 1) * 100:+5.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-floor", action="store_true", help="the paper's queue alone (no device-memory floor)")
    args = parser.parse_args()
    floor = not args.no_floor
    started = time.perf_counter()
    t6 = table6(floor)
    print(f"Table 6 (memory floor {'on' if floor else 'off'}): seconds, model vs paper")
    print(f"{'network':9} {'gpu':4} {'fwd model':>9} {'paper':>8} {'err':>7}   {'f+b model':>9} {'paper':>8} {'err':>7}")
    for (net, gpu), (fwd, fb) in t6.items():
        pf, pfb = TABLE6[(net, gpu)]
        print(f"{net:9} {gpu:4} {fwd:9.4f} {pf:8.4f} {_pct(fwd, pf):>7}   {fb:9.4f} {pfb:8.4f} {_pct(fb, pfb):>7}")
    for net in ("alexnet", "resnet50"):
        for col, name in ((0, "forward"), (1, "fwd-bwd")):
            mine = sorted(("P40", "K80", "K40"), key=lambda g: t6[(net, g)][col])
            paper = sorted(("P40", "K80", "K40"), key=lambda g: TABLE6[(net, g)][col])
            print(f"  order {net} {name}: model {' < '.join(mine)}; paper {' < '.join(paper)}")
    t8 = table8(floor)
    print(f"\nTable 8: ResNet-50 on P40s, global batch {TABLE8_BATCH}, links {TABLE8_LINKS | {'mode': '*'}}")
    print(f"{'mode':5} {'1 GPU s':>8} {'paper':>8} {'err':>7}   {'x2':>5} {'paper':>5} {'err':>7}   {'x4':>5} {'paper':>5} {'err':>7}")
    for mode, (t1, s2, s4) in t8.items():
        p1, p2, p4 = TABLE8[mode]
        print(f"{mode:5} {t1:8.4f} {p1:8.4f} {_pct(t1, p1):>7}   {s2:5.2f} {p2:5.2f} {_pct(s2, p2):>7}   {s4:5.2f} {p4:5.2f} {_pct(s4, p4):>7}")
    print("Speed-ups against the paper's measured runtimes (Table 8 'Actual runtime'):")
    for mode, (t1, s2, s4) in t8.items():
        a1, a2, a4 = TABLE8_MEASURED[mode]
        print(f"{mode:5} x2 {s2:5.2f} vs {a1 / a2:5.2f} {_pct(s2, a1 / a2):>7}   x4 {s4:5.2f} vs {a1 / a4:5.2f} {_pct(s4, a1 / a4):>7}")
    print(f"\n({time.perf_counter() - started:.2f} s for {len(t6) + 6} predictions)")


if __name__ == "__main__":
    main()
