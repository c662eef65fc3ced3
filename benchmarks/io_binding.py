"""Benchmark: a decoder's KV cache written into kept storage (Executable.run_into with
codegen.OutputBuffers, ONNX Runtime's IO binding) against new arrays every step (run).

    .venv/bin/python benchmarks/io_binding.py [--layers 12] [--heads 12] [--past 1024]
        [--steps 32] [--threads 2]

The program is the cache half of a GPT-2 step at GPT-2 small's sizes, built in code: per
layer, the new key and value rows (a dense projection of the token) concatenated onto
past_k and past_v [1, heads, past, 64] (the presents, outputs), and the token's attention
over the present keys and values. It runs `--steps` tokens from a past of `--past`, the
presents fed back as the next past, once with `run` and once with `run_into`; both give
the same outputs. Printed: the median ms per token of each and their ratio, and the
storage OutputBuffers keeps. Machines are noisy: quote the ratio and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op


def decoder_cache(layers: int, heads: int, head: int = 64) -> ir.IRModule:
    """Per layer: k, v = the token projected; present = concat(past, new); attention."""
    past = ir.size_var("past")
    rng = np.random.default_rng(0)
    width = heads * head
    token = ir.var("token", shape=(1, width), dtype="float32")
    params, outputs = [token], []
    state: Any = token
    for layer in range(layers):
        presents = []
        for kind in ("k", "v"):
            cache = ir.var(f"past_{layer}_{kind}", shape=(1, heads, past, head), dtype="float32")
            params.append(cache)
            w = ir.const(rng.standard_normal((width, width)).astype("float32") * 0.02)
            new = op.reshape(op.dense(state, w), newshape=(1, 1, heads, head))
            new = op.transpose(new, axes=(0, 2, 1, 3))  # (1, heads, 1, head)
            presents.append(op.concatenate([cache, new], axis=2))
        q = op.reshape(state, newshape=(1, heads, 1, head))
        scores = op.softmax(op.batch_matmul(op.reshape(q, newshape=(heads, 1, head)),
                                            op.reshape(presents[0], newshape=(heads, -1, head))),
                            axis=-1)  # fmt: skip
        values = op.transpose(op.reshape(presents[1], newshape=(heads, -1, head)), axes=(0, 2, 1))
        state = op.reshape(op.batch_matmul(scores, values), newshape=(1, width))
        outputs += presents
    body = ir.Tuple([state, *outputs])
    return ir.infer_type(ir.IRModule.from_expr(ir.Function(params, body)))


def steps(
    run: Any, names: list[str], start: dict[str, np.ndarray], token: np.ndarray, count: int
) -> tuple[list[float], list[np.ndarray]]:
    """`count` tokens, presents fed back as the past: each token's seconds, the last outputs."""
    feeds = dict(start)
    seconds, out = [], []
    for _ in range(count):
        t0 = time.perf_counter()
        out = list(run(token=token, **feeds))
        seconds.append(time.perf_counter() - t0)
        feeds = dict(zip(names, out[1:], strict=True))
    return seconds, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--past", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    mod = decoder_cache(args.layers, args.heads)
    bounds = {"past": [0, args.past + args.steps]}
    config = {"codegen.num_threads": args.threads, "codegen.size_bounds": bounds}
    with pm.PassContext(opt_level=3, config=config):
        exe = codegen.build(mod)
    rng = np.random.default_rng(1)
    names = [p for p in exe.input_types if p != "token"]
    start = {
        n: rng.standard_normal((1, args.heads, args.past, 64)).astype("float32") for n in names
    }
    token = rng.standard_normal((1, args.heads * 64)).astype("float32")
    buffers = codegen.OutputBuffers()
    steps(exe.run, names, start, token, 2)  # warm: sizes bound, pages touched once
    fresh, want = steps(exe.run, names, start, token, args.steps)
    kept, got = steps(lambda **f: exe.run_into(buffers, **f), names, start, token, args.steps)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)
    cache_mb = 2 * args.layers * args.heads * (args.past + args.steps) * 64 * 4 / 1e6
    print(f"{args.layers} layers x {args.heads} heads, past {args.past} (+{args.steps} tokens):"
          f" presents {cache_mb:.0f} MB a token; {args.threads} threads;"
          f" load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    a, b = 1e3 * statistics.median(fresh), 1e3 * statistics.median(kept)
    print(f"run (new arrays)      {a:8.2f} ms/token")
    print(f"run_into (kept)       {b:8.2f} ms/token   {b / a:.2f}x")
    print(f"storage kept: {buffers.kept_bytes / 1e6:.0f} MB (two sets)")


if __name__ == "__main__":
    main()
