"""Benchmark: greedy text generation with a decoder step and its KV cache, this compiler
beside ONNX Runtime, one session each for every length.

    .venv/bin/python benchmarks/generate.py [--model FILE.onnx] [--prompt 8] [--tokens 32]
        [--threads 2] [--max-length N]

The model is one decoding step as `torch.onnx.export` writes it with dynamic axes
(default: ../shared/models/dynamic/gpt2_past_128_2_4.onnx): inputs input_ids [1, 1],
attention_mask [1, total] and past_<i>_k/v [1, heads, past, d]; outputs the logits and
present_<i>_k/v [.., past + 1, ..]. The prompt is fed a token at a time (past 0, 1, ...),
then each next token is the argmax of the logits, the presents are fed back as the past
and the mask grows by one. Both engines must produce the same tokens.

Printed: our one build (the program for every size, codegen/plan/every_size.py, built
with it at the capacity 16 and again, larger, when a past length needs more room), then
per engine the prompt's time and the median ms per generated token, twice for ours:
"first pass" (each past length met for the first time: its sizes bound, nothing
compiled) and "again" (the same lengths once more), then "kept outputs": again, with the
presents written into storage kept across steps (Executable.run_into with
codegen.OutputBuffers, ONNX Runtime's IO binding). Machines are noisy: compare ratios
of one run, and say how loaded the machine was (the load average is printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import codegen
import passmgr as pm
from egraph_ir.frontend import from_onnx
from egraph_ir.specialize import symbolic_names

DYNAMIC = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "dynamic"
DEFAULT = DYNAMIC / "gpt2_past_128_2_4.onnx"

Step = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


def cache_inputs(model: Any) -> list[tuple[str, tuple[int, ...]]]:
    """The past_* inputs and their shapes with past = 0 (from the symbolic input types)."""
    out = []
    for name, t in model.input_types.items():
        if name.startswith("past"):
            out.append((name, tuple(d if isinstance(d, int) else 0 for d in t.shape)))
    return out


def generate(
    step: Step, past_inputs: list[tuple[str, tuple[int, ...]]], prompt: list[int], tokens: int
) -> tuple[list[int], float, list[float]]:
    """Greedy decoding: the generated ids, the prompt's seconds and each token's."""
    past = {name: np.zeros(shape, np.float32) for name, shape in past_inputs}
    ids: list[int] = []
    per_token: list[float] = []
    prompt_s = 0.0  # the steps that only read the prompt (the last one yields a token)
    start = time.perf_counter()
    feed = prompt[0]
    for position in range(len(prompt) + tokens - 1):
        t0 = time.perf_counter()
        feeds = {
            "input_ids": np.array([[feed]], np.int64),
            "attention_mask": np.ones((1, position + 1), np.int64),
            **past,
        }
        logits, *presents = step(feeds)
        past = dict(zip((name for name, _ in past_inputs), presents, strict=True))
        if position + 1 < len(prompt):
            feed = prompt[position + 1]
            prompt_s = time.perf_counter() - start
            continue
        feed = int(np.argmax(logits[0]))
        ids.append(feed)
        per_token.append(time.perf_counter() - t0)
    return ids, prompt_s, per_token


def ours(path: Path, threads: int, max_length: int = 0) -> tuple[Any, float]:
    """The symbolic executable and its build's seconds. `max_length`: the longest
    sequence generation will reach, as every size's upper bound (codegen.size_bounds:
    the program for every size is then built once, for them); 0: none given."""
    start = time.perf_counter()
    config: dict[str, Any] = {"codegen.num_threads": threads}
    if max_length:
        names = symbolic_names(from_onnx(path)["main"])  # the sizes the export names
        config["codegen.size_bounds"] = {n: [0, max_length] for n in names}
    with pm.PassContext(opt_level=3, config=config):
        exe = codegen.build(path)
    return exe, time.perf_counter() - start


def onnxruntime(path: Path, threads: int) -> Step:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


def run(
    path: Path, prompt_len: int, tokens: int, threads: int, max_length: int = 0
) -> dict[str, Any]:
    """Both engines on one prompt; the rows to print and whether the tokens agree."""
    exe, build_s = ours(path, threads, max_length)
    exe.capacity = prompt_len + tokens  # keep every length's binding for "again"
    past_inputs = cache_inputs(exe)
    prompt = [int(v) for v in np.random.default_rng(0).integers(1, 1000, prompt_len)]
    ort_step = onnxruntime(path, threads)
    want, ort_prompt, ort_tokens = generate(ort_step, past_inputs, prompt, tokens)
    rows = [("onnxruntime", ort_prompt, ort_tokens)]
    buffers = codegen.OutputBuffers()  # the presents written into kept storage
    steps: dict[str, Step] = {
        "ours, first pass": exe.run,
        "ours, again": exe.run,
        "ours, kept outputs": lambda feeds: exe.run_into(buffers, feeds),
    }
    for label, step in steps.items():
        got, prompt_s, per_token = generate(step, past_inputs, prompt, tokens)
        if got != want:
            raise SystemExit(f"{label}: tokens {got} differ from ONNX Runtime's {want}")
        rows.append((label, prompt_s, per_token))
    return {"build_s": build_s, "rows": rows, "tokens": want, "compiles": len(exe.compiles)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=DEFAULT)
    parser.add_argument("--prompt", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--max-length", type=int, default=0,
        help="bound every size at this length: one build up front (default: none, the "
        "program grows its capacity as the lengths do)",
    )  # fmt: skip
    args = parser.parse_args()
    if not args.model.exists():
        raise SystemExit(f"{args.model}: no such model (../shared/models/dynamic/ has them)")
    result = run(args.model, args.prompt, args.tokens, args.threads, args.max_length)
    print(f"model {args.model.name}: prompt {args.prompt}, {args.tokens} tokens, "
          f"{args.threads} threads; load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"our build: {result['build_s']:.2f} s; builds in all: {result['compiles']}")
    ort_ms = 1e3 * statistics.median(result["rows"][0][2])
    print(f"{'engine':18} {'prompt ms':>10} {'ms/token':>9} {'vs ORT':>7}")
    for label, prompt_s, per_token in result["rows"]:
        ms = 1e3 * statistics.median(per_token)
        print(f"{label:18} {1e3 * prompt_s:10.1f} {ms:9.2f} {ms / ort_ms:7.2f}")
    print(f"tokens identical: {result['tokens'][:12]}...")


if __name__ == "__main__":
    main()
