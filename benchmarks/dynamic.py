"""Benchmark: models with symbolic dimensions at several shapes, one build for all of them,
beside ONNX Runtime and beside our own build specialised to each shape.

    .venv/bin/python benchmarks/dynamic.py [--threads 2] [--rounds 5]

For BERT (batch, seq) and the GPT-2 decoder step (past) of ../shared/models/dynamic it
prints per shape: the first run at that shape (seconds; the builds made so far, counting
the one with codegen.build; whether the program built for every size ran it), then
medians of warm runs of ours, ONNX Runtime and our static build of that shape, timed in
`--rounds` interleaved rounds (engines.interleaved_ms: a noisy spell, or ONNX Runtime's
threads still spinning after its runs, then hits all three), and the ratios. Machines are
noisy: compare ratios of one run and quote the load average printed.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from engines import interleaved_ms  # benchmarks/engines.py, beside this script

import codegen
import passmgr as pm
from egraph_ir.frontend import from_onnx

DYNAMIC = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "dynamic"
BERT_SHAPES = [(1, 1), (1, 16), (2, 37), (4, 64), (3, 128), (1, 384)]
GPT2_PASTS = [0, 1, 16, 63, 127, 200]


def bert(batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 1000 + seq)
    ids = rng.integers(0, 30000, (batch, seq)).astype(np.int64)
    return {"input_ids": ids, "attention_mask": np.ones((batch, seq), np.int64)}


def gpt2(past: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(past)
    feeds = {"input_ids": np.array([[7]], np.int64)}
    feeds["attention_mask"] = np.ones((1, past + 1), np.int64)
    for name in ("past_0_k", "past_0_v", "past_1_k", "past_1_v"):
        feeds[name] = rng.standard_normal((1, 4, past, 32)).astype(np.float32)
    return feeds


def measure(path: Path, shapes: list[dict[str, np.ndarray]], threads: int, rounds: int) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    config = {"codegen.num_threads": threads}
    with pm.PassContext(opt_level=3, config=config):
        start = time.perf_counter()
        exe = codegen.build(path)
        print(f"{path.name}: one build {time.perf_counter() - start:.2f} s")
    print(f"{'shape':>22} {'first s':>8} {'builds':>7} {'every':>5} {'ours ms':>8} "
          f"{'ORT ms':>8} {'static':>8} {'/ORT':>5} {'/static':>7}")  # fmt: skip
    for feeds in shapes:
        start = time.perf_counter()
        exe.run_dict(feeds)
        first = time.perf_counter() - start
        step = exe.for_inputs(feeds)
        with pm.PassContext(opt_level=3, config=config):
            static = codegen.build(from_onnx(path, shapes={k: v.shape for k, v in feeds.items()}))
        ms = interleaved_ms(
            {
                "ours": lambda: exe.run(**feeds),  # noqa: B023
                "ORT": lambda: session.run(None, feeds),  # noqa: B023
                "static": lambda: static.run(**feeds),  # noqa: B023
            },
            rounds,
        )
        ours, theirs, fixed = ms["ours"], ms["ORT"], ms["static"]
        shape = "x".join(str(s) for s in next(iter(feeds.values())).shape)
        if "past_0_k" in feeds:
            shape = f"past {feeds['past_0_k'].shape[2]}"
        every = "yes" if step.at is not None else "no"
        print(f"{shape:>22} {first:8.3f} {len(exe.compiles):7d} "
              f"{every:>5} {ours:8.3f} {theirs:8.3f} {fixed:8.3f} "
              f"{ours / theirs:5.2f} {ours / fixed:7.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not DYNAMIC.exists():
        raise SystemExit(f"{DYNAMIC}: no dynamic models here")
    print(f"{args.threads} threads; load average {os.getloadavg()[0]:.2f}")
    measure(
        DYNAMIC / "bert_dyn_128_2.onnx", [bert(*s) for s in BERT_SHAPES], args.threads, args.rounds
    )
    measure(
        DYNAMIC / "gpt2_past_128_2_4.onnx",
        [gpt2(p) for p in GPT2_PASTS],
        args.threads,
        args.rounds,
    )


if __name__ == "__main__":
    main()
