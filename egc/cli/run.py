"""`egc run` (a saved executable on inputs, a latency benchmark, a profile and trace) and
`egc tune` (kernel choices measured on this machine)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

import passmgr as pm
from codegen.artifact.check import read_public_key
from codegen.artifact.load import load
from egraph_ir.compare import leaves
from egraph_ir.errors import CompilerError
from egraph_ir.specialize import sizes_or_one, static_type

from ..job import load_model
from .args import split_dims
from .values import print_table


def print_profile(profile: Any, top: int | None) -> None:
    """The per-kernel table (the `top` slowest), time by kind of work, and the total."""
    rows = profile.rows()
    shown = rows[:top] if top else rows
    title = "per-kernel profile" + (f" (slowest {len(shown)} of {len(rows)})" if top else "")
    if profile.sizes:  # a symbolic program: the sizes it ran at
        title += " at " + ", ".join(f"{k}={v}" for k, v in profile.sizes.items())
    print_table(title, profile.HEADER, shown)
    total = profile.total_seconds or 1.0
    by_op = [
        [name, str(n), f"{1e6 * s:.1f}", f"{100 * s / total:.1f}%"]
        for name, n, s in profile.by_op()
    ]
    print_table("time by kind of kernel", ("kind and op", "kernels", "us", "share"), by_op)
    print(f"total {1e6 * profile.total_seconds:.1f} us in {len(rows)} kernels (medians summed)")


CHOICE_HEADER = (
    "kernel", "computes", "ops", "kernel kind", "layout", "predicted us", "measured us",
)  # fmt: skip


def print_choices(profile: Any) -> None:
    """--report: what the extraction chose, kernel by kernel in run order (its ops, the
    kernel that runs them, the layout it writes) with the cost model's prediction beside
    the measured median, then the layouts, conversions and prediction error summed."""
    kernels = sorted(profile, key=lambda k: k.order)
    rows = [
        [
            k.name, k.computes, ",".join(dict.fromkeys(k.ops)), k.label, k.layout or "-",
            f"{1e6 * k.predicted:.1f}" if k.predicted else "",
            f"{1e6 * k.seconds:.1f}",
        ]
        for k in kernels
    ]  # fmt: skip
    print_table("the extraction's choices (run order)", CHOICE_HEADER, rows)
    for line in choice_summary(profile):
        print(line)


def choice_summary(profile: Any) -> list[str]:
    """Lines: kernels per result layout, the layout conversions, predicted vs measured."""
    kernels = sorted(profile, key=lambda k: k.order)
    by_layout: dict[str, int] = {}
    for k in kernels:
        by_layout[k.layout or "not 4-D"] = by_layout.get(k.layout or "not 4-D", 0) + 1
    lines = ["layouts written: " + ", ".join(f"{n} {name}" for name, n in by_layout.items())]
    conversions = [k for k in kernels if "layout_transform" in k.ops]
    listed = ", ".join(f"{k.name} (to {k.layout or '-'})" for k in conversions)
    lines.append(f"layout conversions: {len(conversions)}" + (f": {listed}" if listed else ""))
    priced = [k for k in kernels if k.predicted]
    if priced:
        predicted = sum(k.predicted for k in priced)
        measured = sum(k.seconds for k in priced)
        lines.append(
            f"cost model: {len(priced)} kernels priced, {1e6 * predicted:.0f} us predicted, "
            f"{1e6 * measured:.0f} us measured (x{measured / predicted:.2f})"
        )
    return lines


def write_trace(profile: Any, path: str | None) -> None:
    """--trace: the profile as a Chrome trace (Perfetto, chrome://tracing)."""
    if not path:
        return
    try:
        Path(path).write_text(json.dumps(profile.trace()))
    except OSError as exc:
        raise CompilerError(f"{path}: cannot write ({exc.strerror})") from None


def read_inputs(args: argparse.Namespace, types: dict[str, Any]) -> dict[str, np.ndarray]:
    """--input NAME=FILE.npy / FILE.npz, then --random values for the inputs left."""
    inputs: dict[str, np.ndarray] = {}
    for name, path in args.input:
        try:
            data = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise CompilerError(f"{path}: cannot read as .npy/.npz ({exc})") from None
        if isinstance(data, np.lib.npyio.NpzFile):
            inputs.update({k: data[k] for k in data.files})
        elif name:
            inputs[name] = data
        elif len(types) == 1:
            inputs[next(iter(types))] = data
        else:
            raise CompilerError(f"{path}: say which input it is (NAME={path})")
    if args.random:
        rng = np.random.default_rng(args.seed)
        sizes = sizes_or_one(types.values(), split_dims(args.dim)[0])  # a symbolic program's
        for name, t in types.items():
            shape = static_type(t, sizes).shape  # type: ignore[union-attr]
            inputs.setdefault(name, rng.standard_normal(shape).astype(t.dtype))
    missing = [name for name in types if name not in inputs]
    if missing:
        given = ", ".join(f"{n}: {types[n]}" for n in missing)
        raise CompilerError(
            f"no value for input(s) {given}; give them with --input NAME=FILE.npy "
            "(or one .npz) or --random"
        )
    return inputs


def run_saved(args: argparse.Namespace) -> int:
    """Load a saved executable and run it on inputs from .npy/.npz files."""
    if args.require_signature and not args.trusted_key:
        raise CompilerError("--require-signature needs at least one --trusted-key FILE.pub")
    trusted = [read_public_key(p) for p in args.trusted_key] if args.trusted_key else None
    exe = load(args.file, threads=args.threads, trusted_keys=trusted)
    inputs = read_inputs(args, exe.input_types)
    named: dict[str, Any] = dict(zip(exe.output_names, leaves(exe.run(**inputs)), strict=True))
    if args.output:
        try:
            np.savez(args.output, **named)
        except OSError as exc:
            raise CompilerError(f"{args.output}: cannot write ({exc.strerror})") from None
    timing = args.repeats is not None or args.duration is not None
    latency = None
    if timing:
        repeats = args.repeats if args.repeats is not None else 1
        latency = exe.benchmark(inputs, repeats, args.warmup, args.duration)
    profile = None
    if args.profile or args.trace or args.report:
        profile = exe.profile(inputs, repeats=args.repeats or 10)
        write_trace(profile, args.trace)
    if args.json:
        report: dict[str, Any] = {
            "file": args.file,
            "outputs": {
                n: {"dtype": str(v.dtype), "shape": list(v.shape)} for n, v in named.items()
            },
            "threads": exe.threads,
        }
        if latency is not None:
            report["latency"] = latency.to_json()
        if profile is not None and (args.profile or args.report):
            report["profile"] = [dataclasses.asdict(k) for k in profile]
        if profile is not None and args.report:
            report["choices"] = choice_summary(profile)
        print(json.dumps(report, indent=2))
        return 0
    if args.output:
        print(f"wrote {', '.join(named)} to {args.output}")
    else:
        for name, value in named.items():
            print(f"{name}: {value.dtype}{list(value.shape)}")
            print(np.array2string(value, threshold=20, edgeitems=3))
    if latency is not None:
        print(latency)
    if profile is not None and args.profile:
        print_profile(profile, args.top)
    if profile is not None and args.report:
        print_choices(profile)
    return 0


def tune_model(args: argparse.Namespace) -> int:
    """`egc tune MODEL`: measure the kernel candidates of the model's anchors, and each
    convolution in each layout, on this machine; record them where later compiles read
    them."""
    from codegen.measure.tune import TuneReport, tune

    mod, _, _ = load_model(args.model, dict(args.shape))
    config: dict[str, Any] = {**dict(args.config), "codegen.num_threads": args.threads}
    with pm.PassContext(opt_level=3, config=config):
        report: TuneReport = tune(mod, args.db)
    print_table(f"measured kernels ({args.threads or 'all'} threads)", report.HEADER, report.rows())
    print(f"recorded {len(report.kernels)} anchor shape(s) in {report.path}")
    if args.layouts:  # every convolution in each layout: what BlockLayout's costs read
        from codegen.measure.kernel_rates import measure_and_save

        with pm.PassContext(opt_level=3, config=config):
            rates = measure_and_save(mod, path=args.db)
        print_table("convolutions by kind and layout (median GFLOP/s)", rates.HEADER, rates.rows())
        print(f"recorded {len(rates.times)} convolution form(s) in {rates.path}")
    return 0
