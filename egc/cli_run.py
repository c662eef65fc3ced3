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
from codegen.artifact import load
from codegen.artifact_check import read_public_key
from egraph_ir.compare import leaves
from egraph_ir.errors import CompilerError

from .cli_values import print_table
from .job import load_model


def print_profile(profile: Any, top: int | None) -> None:
    """The per-kernel table (the `top` slowest), time by kind of work, and the total."""
    rows = profile.rows()
    shown = rows[:top] if top else rows
    title = "per-kernel profile" + (f" (slowest {len(shown)} of {len(rows)})" if top else "")
    print_table(title, profile.HEADER, shown)
    total = profile.total_seconds or 1.0
    by_op = [
        [name, str(n), f"{1e6 * s:.1f}", f"{100 * s / total:.1f}%"]
        for name, n, s in profile.by_op()
    ]
    print_table("time by kind of kernel", ("kind and op", "kernels", "us", "share"), by_op)
    print(f"total {1e6 * profile.total_seconds:.1f} us in {len(rows)} kernels (medians summed)")


def write_trace(profile: Any, path: str | None) -> None:
    """--trace: the profile as a Chrome trace (Perfetto, chrome://tracing)."""
    if not path:
        return
    try:
        Path(path).write_text(json.dumps(profile.trace()))
    except OSError as exc:
        raise CompilerError(f"{path}: cannot write ({exc.strerror})") from None


def run_saved(args: argparse.Namespace) -> int:
    """Load a saved executable and run it on inputs from .npy/.npz files."""
    if args.require_signature and not args.trusted_key:
        raise CompilerError("--require-signature needs at least one --trusted-key FILE.pub")
    trusted = [read_public_key(p) for p in args.trusted_key] if args.trusted_key else None
    exe = load(args.file, threads=args.threads, trusted_keys=trusted)
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
        elif len(exe.input_types) == 1:
            inputs[next(iter(exe.input_types))] = data
        else:
            raise CompilerError(f"{path}: say which input it is (NAME={path})")
    if args.random:
        rng = np.random.default_rng(args.seed)
        for name, t in exe.input_types.items():
            inputs.setdefault(name, rng.standard_normal(t.shape).astype(t.dtype))
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
    if args.profile or args.trace:
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
        if profile is not None and args.profile:
            report["profile"] = [dataclasses.asdict(k) for k in profile]
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
    return 0


def tune_model(args: argparse.Namespace) -> int:
    """`egc tune MODEL`: measure the kernel candidates of the model's anchors, and each
    convolution in each layout, on this machine; record them where later compiles read
    them."""
    from codegen.tune import TuneReport, tune

    mod, _, _ = load_model(args.model, dict(args.shape))
    config: dict[str, Any] = {"codegen.num_threads": args.threads}
    with pm.PassContext(opt_level=3, config=config):
        report: TuneReport = tune(mod, args.db)
    print_table(f"measured kernels ({args.threads or 'all'} threads)", report.HEADER, report.rows())
    print(f"recorded {len(report.kernels)} anchor shape(s) in {report.path}")
    if args.layouts:  # every convolution in each layout: what BlockLayout's costs read
        from codegen.kernel_rates import measure_and_save

        with pm.PassContext(opt_level=3, config=config):
            rates = measure_and_save(mod)
        print_table("convolutions by kind and layout (median GFLOP/s)", rates.HEADER, rates.rows())
        print(f"recorded {len(rates.times)} convolution form(s) in {rates.path}")
    return 0
