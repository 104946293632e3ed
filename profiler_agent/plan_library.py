"""Built-in sweep plans (`quick`, `paper`) and plan lookup by name or file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from gac.contracts.measurements import Dtype, Op
from gac.contracts.plans import Adaptive, Sweep, SweepPlan, Timing, ValueRange, load_plan

BF16, FP16, FP32 = Dtype.bfloat16, Dtype.float16, Dtype.float32
_SHORT = {BF16: "bf16", FP16: "fp16", FP32: "fp32"}


def quick_plan(dtypes: Iterable[Dtype | str] | None = None) -> SweepPlan:
    """About a minute on a 2-core CPU; shows real steps.

    dtypes: what to sweep in, normally the platform's fast dtype (`gac` picks it;
    gac.agent.dtypes); default bfloat16. On an AVX-512-BF16 CPU (oneDNN 3.x)
    a bfloat16 GEMM's time along N is a staircase with a step every 16 columns
    (n in 65..80 costs the same, 81..96 the next step up), while float32 grows
    smoothly: a float32 N sweep is added as the contrast when float32 is not swept
    anyway. One small point each for the other ops keeps every kernel exercised.
    Where bfloat16 is emulated (AVX2 only) it is tens of times slower than float32
    and its steps are the emulator's: sweep float32 there.
    """
    ds = [Dtype(d) for d in dtypes] if dtypes else [BF16]
    ds = list(dict.fromkeys(ds))  # once each, in the order given
    names = "+".join(_SHORT[d] for d in ds)
    timing = Timing(time_cap_ms=500, warmup_ms=20, target_spread=0.05, median_ci=0.01)
    sweeps = [
        Sweep(
            op=Op.gemm,
            dtypes=ds,
            axis="n",
            fixed={"m": 256, "k": 256},
            values=ValueRange(start=56, stop=200, step=4),
            label=f"{names} GEMM, N swept",
        ),
        Sweep(
            op=Op.gemm,
            dtypes=ds,
            axis="k",
            fixed={"m": 256, "n": 256},
            values=ValueRange(start=56, stop=200, step=8),
            label=f"{names} GEMM, K swept",
        ),
    ]
    if FP32 not in ds:
        sweeps.append(
            Sweep(
                op=Op.gemm,
                dtypes=[FP32],
                axis="n",
                fixed={"m": 256, "k": 256},
                values=ValueRange(start=56, stop=200, step=8),
                label="fp32 GEMM, N swept (contrast)",
            )
        )
    sweeps += [
        Sweep(op=Op.gemv, dtypes=ds, axis="k", fixed={"n": 1024}, values=[1016, 1024, 1032], label=f"{names} GEMV near 1024"),
        Sweep(
            op=Op.sdpa,
            dtypes=ds,
            axis="head_dim",
            fixed={"b": 1, "h": 4, "s": 128},
            values=[48, 64, 80, 96, 112, 128],
            label=f"{names} SDPA head_dim",
        ),
        Sweep(
            op=Op.lowrank,
            dtypes=ds,
            axis="rank",
            fixed={"m": 128, "in_features": 512, "out_features": 512},
            values=[60, 64, 72],
            label=f"{names} low-rank pair",
        ),
        Sweep(op=Op.mlp, dtypes=ds, axis="width", fixed={"m": 64, "hidden": 256}, values=[680, 688, 704], label=f"{names} gated MLP width"),
    ]
    contrast = "" if FP32 in ds else ", fp32 contrast"
    return SweepPlan(
        name="quick",
        description=f"{names} GEMM N/K sweeps 56..200{contrast}, one point per other op",
        timing=timing,
        sweeps=sweeps,
    )


def paper_plan(dtypes: list[Dtype] | None = None) -> SweepPlan:
    """The seed paper's sweeps (meant for a GPU: hours on a CPU).

    SDPA head_dim 64..256 at B=4, S=2048, H=32; GEMM with M=N=2048, K=128 and
    each dimension swept; GEMM (M=1024 tokens) and GEMV with N or K near 4096.
    """
    ds = dtypes or [FP16]
    base = {"m": 2048, "n": 2048, "k": 128}
    gemm_axes = [
        Sweep(
            op=Op.gemm,
            dtypes=ds,
            axis=axis,
            fixed={a: v for a, v in base.items() if a != axis},
            values=ValueRange(start=lo, stop=hi, step=1),
            label=f"GEMM M=N=2048,K=128, {axis} swept",
        )
        for axis, lo, hi in (("m", 1984, 2112), ("n", 1984, 2112), ("k", 64, 256))
    ]
    return SweepPlan(
        name="paper",
        description="EuroMLSys'26 GAC sweeps: SDPA head_dim 64..256, GEMM 2048x2048x128 per axis, GEMM/GEMV near 4096",
        timing=Timing(time_cap_ms=1_000, warmup_ms=100, target_spread=0.03, median_ci=0.005),
        sweeps=[
            Sweep(
                op=Op.sdpa,
                dtypes=ds,
                axis="head_dim",
                fixed={"b": 4, "s": 2048, "h": 32},
                values=ValueRange(start=64, stop=256, step=1),
                label="SDPA head_dim 64..256",
            ),
            *gemm_axes,
            Sweep(
                op=Op.gemm,
                dtypes=ds,
                axis="n",
                fixed={"m": 1024, "k": 4096},
                values=ValueRange(start=4032, stop=4160, step=1),
                label="GEMM N near 4096",
            ),
            Sweep(
                op=Op.gemm,
                dtypes=ds,
                axis="k",
                fixed={"m": 1024, "n": 4096},
                values=ValueRange(start=4032, stop=4160, step=1),
                label="GEMM K near 4096",
            ),
            Sweep(
                op=Op.gemv,
                dtypes=ds,
                axis="k",
                fixed={"n": 4096},
                values=ValueRange(start=4032, stop=4160, step=1),
                label="GEMV K near 4096",
            ),
            Sweep(
                op=Op.gemv,
                dtypes=ds,
                axis="n",
                fixed={"k": 4096},
                values=ValueRange(start=4032, stop=4160, step=1),
                label="GEMV N near 4096",
            ),
        ],
    )


def cliff_map_plan(adaptive: bool = False, lo: int = 64, hi: int = 160, dtype: Dtype = BF16) -> SweepPlan:
    """GEMM N and K sweeps at unit step (the benchmark's exhaustive map), bf16 unless said;
    with adaptive=True the same grid, refined only around steps."""
    ad = Adaptive(coarse_step=8, jump=0.06) if adaptive else None
    return SweepPlan(
        name="cliff-map-adaptive" if adaptive else "cliff-map",
        timing=Timing(time_cap_ms=400, warmup_ms=10, target_spread=0.05, median_ci=0.01),
        sweeps=[
            Sweep(
                op=Op.gemm, dtypes=[dtype], axis="n", fixed={"m": 256, "k": 256}, values=ValueRange(start=lo, stop=hi, step=1), adaptive=ad
            ),
            Sweep(
                op=Op.gemm, dtypes=[dtype], axis="k", fixed={"m": 256, "n": 256}, values=ValueRange(start=lo, stop=hi, step=1), adaptive=ad
            ),
        ],
    )


BUILTIN_PLANS = {"quick": quick_plan, "paper": paper_plan}


def resolve_plan(name_or_path: str, dtypes: list[Dtype | str] | None = None) -> SweepPlan:
    """A built-in plan by name (built in these dtypes, when given), else a plan file
    (YAML or JSON) limited to these dtypes."""
    if name_or_path in BUILTIN_PLANS:
        return BUILTIN_PLANS[name_or_path]([Dtype(d) for d in dtypes] if dtypes else None)
    path = Path(name_or_path)
    if not path.exists():
        raise FileNotFoundError(f"no built-in plan {name_or_path!r} ({', '.join(BUILTIN_PLANS)}) and no such file")
    plan = load_plan(path)
    return plan.restricted(dtypes) if dtypes else plan


__all__ = ["BUILTIN_PLANS", "cliff_map_plan", "paper_plan", "quick_plan", "resolve_plan"]
