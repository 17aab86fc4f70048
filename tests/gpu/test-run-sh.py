#!/usr/bin/env python3
# lingbot-gst: tests/gpu/run.sh without a GPU (suite gpu-script)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
#   test-run-sh.py            (LINGBOT_SOURCE_ROOT, LINGBOT_BENCH set)
#
# Runs a copy of run.sh (LINGBOT_RUN_SH, default the source tree's) in a
# scratch tree with a carried build (.gpu-carry/bundle.tar.xz, the path
# the device runs use) whose programs are stubs, a simulated nvidia-smi
# (an H100 80 GB, an H200, a 40 GB card), ldd, gst-launch-1.0 and ncu on
# the PATH, and checks:
#  - the order in which the steps ran (each stub logs what it was asked
#    to run, classified from its arguments and environment: the goldens,
#    the op parity programs, block-bf16, block-fp8, the 40-layer chunk,
#    rank-of-4, decode, the bf16 VAEs, the product, then the rest);
#  - the gates' figures and choices on each card: the 14B steps in bf16 on
#    the H200, in fp8 on the H100 (rank 0 of 4 in bf16), skipped on 40 GB
#    (rank 0 of 4 in fp8), the figures from the real lingbot-bench
#    --estimate (the stub hands --estimate to it);
#  - summary.txt's lines: gates, steps, the decode period ratio, the
#    cuDNN SDPA plans built at session start and in the chunks;
#  - the exit status: 0 when all passes, 1 when a suite program fails,
#    when a step fails, when a step times out (LINGBOT_GPU_STEP_MAX_S=2
#    against a stub that sleeps).
# The same file is the stubs' program (--stub NAME ARGS...).
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

SUITE = ["test-dit-cuda", "test-vae-cuda", "test-gemm-parity",
         "test-ops-parity", "test-attention-parity", "test-channel-cuda",
         "test-nccl-collectives"]
SUITE_DIRS = {"test-dit-cuda": "tests/dit", "test-vae-cuda": "tests/vae"}

CARDS = {
    "h100": ("NVIDIA H100 80GB HBM3", 81559, 81000),
    "h200": ("NVIDIA H200", 143771, 143000),
    "a40": ("NVIDIA A40", 46068, 40000),
}


def opt(argv, name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default


def classify(name, argv, env):
    """What a stub was asked to run, as a step name (None: not a step)."""
    if name in SUITE:
        return "suite:" + name[len("test-"):]
    if name == "bench-cuda-ops":
        return "bench-ops"
    if name == "gst-launch-1.0":
        return "ranks-one-gpu"
    if name != "lingbot-bench" or not argv:
        return None
    cmd, prec = argv[0], opt(argv, "--precision", "fp32")
    if cmd == "gemm":
        return "bench-gemm"
    if cmd == "dit":
        if "--estimate" in argv:
            return None
        if env.get("LINGBOT_DIT_GRAPHS") == "0":
            return "profile-" + prec
        if "--rank-of" in argv:
            return "rank-of-4-" + prec
        if opt(argv, "--layers") == "1":
            for var, val, step in (
                    ("LINGBOT_CUDA_ATTENTION", "own", "block-bf16-own"),
                    ("LINGBOT_DIT_GEMM_INPUTS", "f32", "block-bf16-f32in"),
                    ("LINGBOT_CUDA_GEMM_EPILOGUE", "own", "block-gelu-own")):
                if env.get(var) == val:
                    return step
            return "block-" + prec
        return "full-" + prec
    if cmd == "vae":
        if env.get("LINGBOT_CUDA_CONV_LAYOUT") == "ndhwc":
            return "vae-bf16-ndhwc"
        return "vae" if prec == "fp32" else "vae-" + prec
    if cmd == "direct" and opt(argv, "--engine") == "session":
        if "--compare" in argv:
            return "decode-" + prec
        return ("decode-overlap" if "--decode-overlap" in argv
                else "decode-serial")
    if cmd in ("direct", "replay"):
        return "product-%s-%s" % (cmd, prec)
    return None


def stub_report(prec):
    return {"bench": "direct", "config": {"precision": prec},
            "chunks": [],
            "summary": {"total_frames": 77, "total_chunks": 5,
                        "chunk_period_seconds": {"mean": 1.5},
                        "chunk_compute_seconds": {"p50": 1.0},
                        "latent_host_bytes": 0}}


def stub(name, argv):
    """A stand-in for a program of the carried build or the machine."""
    env = os.environ
    if name == "ncu":
        # run the profiled program (the first absolute path) as it is
        i = next(i for i, a in enumerate(argv) if a.startswith("/"))
        os.execv(argv[i], argv[i:])
    if name == "nvidia-smi":
        card, total, free = CARDS[env["STUB_CARD"]]
        q = next((a for a in argv if a.startswith("--query-gpu=")), None)
        if "-L" in argv:
            print("GPU 0: %s (UUID: GPU-00000000-1111-2222-3333-444444444444)"
                  % card)
        elif q:
            vals = {"memory.total": total, "memory.free": free,
                    "memory.used": 1234}
            print(", ".join(str(vals[f]) for f in q.split("=", 1)[1]
                            .split(",")))
        else:
            print("(simulated nvidia-smi: %s)" % card)
        return 0
    if name == "ldd":
        print("\tlinux-vdso.so.1 (0x00007fff00000000)")
        return 0
    if name == "lingbot-mkmodel":
        os.makedirs(opt(argv, "--out"), exist_ok=True)
        return 0
    if name == "lingbot-bench" and "--estimate" in argv:
        bench = env["STUB_REAL_BENCH"]
        os.execv(bench, [bench] + argv)
    step = classify(name, argv, env)
    if step is None:
        return 0
    with open(env["STUB_LOG"], "a") as f:
        f.write(step + "\n")
    if step == env.get("STUB_HANG"):
        os.execvp("sleep", ["sleep", "20"])
    if step == env.get("STUB_FAIL"):
        print("# %s: FAIL (stub)" % step)
        return 1
    if name.startswith("test-"):
        print("# gemm stub: max rel 1e-6")
        return 0
    if name == "bench-cuda-ops":
        print(json.dumps({"op": "gemm", "case": "stub", "math": "fp32",
                          "ms": 1.0, "gflops": 1000.0}))
        return 0
    cmd, prec = argv[0], opt(argv, "--precision", "fp32")
    out = opt(argv, "--output")
    if cmd == "dit":
        print(json.dumps({"bench": "dit", "event": "setup", "layers": 1,
                          "setup_s": 1.0}))
        print(json.dumps({"bench": "dit", "event": "chunk", "keys": 28080,
                          "compute_s": 0.2, "tflops": 200.0, "mfu": 0.2}))
        print(json.dumps({"bench": "dit", "event": "summary",
                          "sdpa_plans_at_start": 5,
                          "sdpa_plans_in_chunks": 0,
                          "steady": {"chunks": 2, "mean_s": 0.1,
                                     "tflops": 390.0, "mfu": 0.39,
                                     "mfu_reference": 0.45}}))
    elif cmd == "vae":
        print(json.dumps({"bench": "vae", "decode_tflop": 54.2,
                          "runs": [{"first_chunk_s": 1.0,
                                    "steady_chunk_s": 0.25,
                                    "steady_tflops": 200.0}]}))
    elif cmd == "direct" and "--compare" in argv:
        rep = {"bench": "compare",
               "runs": [stub_report(prec), stub_report(prec)],
               "rounds": [{"round": 0, "a": 1.0, "b": 1.0, "ratio": 1.0,
                           "period_a": 2.0, "period_b": 1.6,
                           "period_ratio": 1.25}],
               "median_ratio": 1.0, "median_period_ratio": 1.25}
        json.dump(rep, open(out, "w"))
    elif cmd in ("direct", "replay") and out:
        json.dump(stub_report(prec), open(out, "w"))
    return 0


def write_exe(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


def make_tree(tmp, run_sh, src):
    """A scratch source tree: run.sh, the bundle of stubs, the PATH's."""
    root = os.path.join(tmp, "root")
    os.makedirs(os.path.join(root, "tests", "gpu"))
    shutil.copy(run_sh, os.path.join(root, "tests", "gpu", "run.sh"))
    os.makedirs(os.path.join(root, "tools"))
    shutil.copy(os.path.join(src, "tools", "openblas-coretype.sh"),
                os.path.join(root, "tools"))
    me = os.path.abspath(__file__)

    def wrapper(name):
        return ('#!/bin/sh\nexec "%s" "%s" --stub %s "$@"\n'
                % (sys.executable, me, name))

    stage = os.path.join(tmp, "stage")
    b = os.path.join(stage, "build-gpu")
    for t in SUITE:
        write_exe(os.path.join(b, SUITE_DIRS.get(t, "tests/gpu"), t),
                  wrapper(t))
    write_exe(os.path.join(b, "tests/gpu/bench-cuda-ops"),
              wrapper("bench-cuda-ops"))
    write_exe(os.path.join(b, "tools/lingbot-bench"),
              wrapper("lingbot-bench"))
    write_exe(os.path.join(b, "tools/lingbot-mkmodel"),
              wrapper("lingbot-mkmodel"))
    write_exe(os.path.join(b, "kernels/cuda/lingbot-backend-cuda.so"), "")
    write_exe(os.path.join(b, "tests/text/test-spm.model"), "")
    for d in ("lib", "bin", "gst-plugins"):
        os.makedirs(os.path.join(stage, d))
    os.makedirs(os.path.join(root, ".gpu-carry"))
    with tarfile.open(os.path.join(root, ".gpu-carry", "bundle.tar.xz"),
                      "w:xz") as tar:
        for d in ("lib", "bin", "gst-plugins", "build-gpu"):
            tar.add(os.path.join(stage, d), d)
    path = os.path.join(tmp, "path")
    for name in ("nvidia-smi", "ldd", "gst-launch-1.0", "ncu"):
        write_exe(os.path.join(path, name), wrapper(name))
    with open(os.path.join(tmp, "meminfo"), "w") as f:
        f.write("MemTotal:       131072000 kB\n"
                "MemAvailable:   125000000 kB\n")
    return root, path


def run(card, **extra):
    """run.sh on CARD; returns (exit status, the steps run, summary.txt)."""
    src = os.environ["LINGBOT_SOURCE_ROOT"]
    run_sh = os.environ.get("LINGBOT_RUN_SH",
                            os.path.join(src, "tests", "gpu", "run.sh"))
    tmp = tempfile.mkdtemp(prefix="lingbot-run-sh-")
    try:
        root, path = make_tree(tmp, run_sh, src)
        env = dict(os.environ)
        for k in ("LINGBOT_GPU_PROFILE", "LINGBOT_GPU_STEP_MAX_S", "OUT",
                  "BUDGET_S", "STUB_FAIL", "STUB_HANG"):
            env.pop(k, None)
        env.update({"PATH": path + os.pathsep + env.get("PATH", ""),
                    "OUT": os.path.join(tmp, "out"),
                    "STUB_CARD": card,
                    "STUB_LOG": os.path.join(tmp, "steps.log"),
                    "STUB_REAL_BENCH": os.environ["LINGBOT_BENCH"],
                    "LINGBOT_GPU_MEMINFO": os.path.join(tmp, "meminfo")})
        env.update(extra)
        t0 = time.time()
        p = subprocess.run(["bash", os.path.join(root, "tests/gpu/run.sh")],
                           env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=240)
        print("# run.sh on %s %s: rc %d, %.1f s" % (card, extra,
              p.returncode, time.time() - t0))
        steps = []
        if os.path.exists(env["STUB_LOG"]):
            for s in open(env["STUB_LOG"]).read().split():
                if not steps or steps[-1] != s:
                    steps.append(s)
        summary = ""
        sp = os.path.join(env["OUT"], "summary.txt")
        if os.path.exists(sp):
            summary = open(sp).read()
        return p.returncode, steps, summary, p.stdout.decode(errors="replace")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


FAILURES = []


def check(cond, what, detail=""):
    if cond:
        print("ok - %s" % what)
    else:
        print("not ok - %s\n%s" % (what, detail))
        FAILURES.append(what)


def lines_with(summary, prefix):
    return [l for l in summary.splitlines() if l.startswith(prefix)]


def expect_line(summary, line, what):
    check(line in summary.splitlines(), what,
          "# wanted: %s\n# summary.txt:\n%s" % (line, summary))


def expected_order(full, rank, product):
    head = ["suite:" + t[len("test-"):] for t in SUITE]
    return head + [
        "block-bf16", "block-fp8"] + full + [rank, "decode-bf16",
        "vae-bf16", "vae-bf16-ndhwc"] + product[:1] + [
        "bench-ops", "bench-gemm", "block-fp32", "block-bf16-own",
        "block-bf16-f32in", "block-gelu-own", "vae",
        "ranks-one-gpu"] + product[1:] + ["profile-bf16", "profile-fp8"]


GATE_BF16 = "bf16 needs 92.8 GB (1.25 x 72.6 GB + 2 GB)"
GATE_FP8 = "fp8 needs 69.6 GB (1.25 x 54.1 GB + 2 GB)"
GATE_R4_BF16 = "bf16 needs 61.0 GB (1.25 x 47.2 GB + 2 GB)"


def test_cards():
    # the H200: the 14B steps in bf16
    rc, steps, summary, out = run("h200")
    check(rc == 0, "h200: exit status 0 when everything passes", out)
    want = expected_order(["full-bf16"], "rank-of-4-bf16",
                          ["product-direct-bf16", "product-replay-bf16"])
    check(steps == want, "h200: the steps in the order of their value",
          "# wanted %s\n# got    %s" % (want, steps))
    free = "device has 149.9 GB free"
    expect_line(summary, "device 0: 150.8 GB, 149.9 GB free; host: 128.0 GB "
                "available", "h200: the device's memory")
    expect_line(summary, "gate full: %s, %s: runs in bf16" % (GATE_BF16, free),
                "h200: the 40-layer chunk gated in bf16")
    expect_line(summary, "gate rank-of-4: %s, %s: runs in bf16"
                % (GATE_R4_BF16, free), "h200: rank-of-4 gated in bf16")
    expect_line(summary, "gate product: %s, %s: runs in bf16"
                % (GATE_BF16, free), "h200: the product gated in bf16")
    expect_line(summary, "  period ratio serial / overlapped: 1.250 "
                "(2.000 s / 1.600 s)", "h200: the decode's period ratio")
    expect_line(summary, "  block-bf16: cuDNN SDPA plans built at session "
                "start 5, in the chunks 0", "h200: the SDPA plans by phase")
    check(re.search(r"^step decode rc=0 \(\d+ s, limit 120 s\); period ratio "
                    r"serial / overlapped 1\.25$", summary, re.M),
          "h200: the decode step's line", summary)
    expect_line(summary, "run.sh: every step that ran passed",
                "h200: the last line says all passed")

    # the H100 80 GB: the one-GPU 14B steps in fp8, rank 0 of 4 in bf16
    rc, steps, summary, out = run("h100")
    check(rc == 0, "h100: exit status 0 when everything passes", out)
    want = expected_order(["full-fp8"], "rank-of-4-bf16",
                          ["product-direct-fp8", "product-replay-fp8"])
    check(steps == want, "h100: the 14B steps in fp8, in order",
          "# wanted %s\n# got    %s" % (want, steps))
    free = "device has 84.9 GB free"
    expect_line(summary, "gate full: %s; %s, %s: runs in fp8"
                % (GATE_BF16, GATE_FP8, free),
                "h100: the 40-layer chunk falls back to fp8, with figures")
    expect_line(summary, "gate rank-of-4: %s, %s: runs in bf16"
                % (GATE_R4_BF16, free), "h100: rank-of-4 runs in bf16")
    expect_line(summary, "gate product: %s; %s, %s: runs in fp8"
                % (GATE_BF16, GATE_FP8, free), "h100: the product in fp8")
    check(len(lines_with(summary, "step full-fp8 rc=0 ")) == 1,
          "h100: step full-fp8 noted", summary)

    # 40 GB: the one-GPU 14B steps skipped with the figures; rank 0 of 4
    # in fp8; skips do not fail the run
    rc, steps, summary, out = run("a40")
    check(rc == 0, "a40: skipped steps do not fail the run", out)
    want = expected_order([], "rank-of-4-fp8", [])
    check(steps == want, "a40: the 14B one-GPU steps skipped",
          "# wanted %s\n# got    %s" % (want, steps))
    free = "device has 41.9 GB free"
    expect_line(summary, "gate full: skipped: %s; %s, %s"
                % (GATE_BF16, GATE_FP8, free),
                "a40: the 40-layer chunk's skip says the figures")
    expect_line(summary, "gate product: skipped: %s; %s, %s"
                % (GATE_BF16, GATE_FP8, free), "a40: the product's skip")
    check(re.search(r"^gate rank-of-4: %s; fp8 needs 37\.\d GB \(1\.25 x "
                    r"28\.\d GB \+ 2 GB\), %s: runs in fp8$"
                    % (re.escape(GATE_R4_BF16), free), summary, re.M),
          "a40: rank-of-4 in fp8", summary)


def test_failures():
    rc, steps, summary, out = run("h200", STUB_FAIL="suite:ops-parity")
    check(rc == 1, "a failing suite program gives exit status 1", out)
    check(re.search(r"^ 4/7 lingbot-gst:gpu / test-ops-parity FAIL ",
                    summary, re.M), "the suite's FAIL in summary.txt",
          summary)
    expect_line(summary, "run.sh: failed: suite", "the failed suite named")
    check("product-replay-bf16" in steps, "the steps after it still ran",
          str(steps))

    rc, steps, summary, out = run("h200", STUB_FAIL="block-fp8")
    check(rc == 1, "a failing step gives exit status 1", out)
    check(len(lines_with(summary, "step block-fp8 rc=1 ")) == 1,
          "the failed step's status", summary)
    expect_line(summary, "run.sh: failed: block-fp8",
                "the failed step named")

    rc, steps, summary, out = run("h200", STUB_HANG="full-bf16",
                                  LINGBOT_GPU_STEP_MAX_S="2")
    check(rc == 1, "a step that times out gives exit status 1", out)
    check(len(lines_with(summary, "step full-bf16 timed out (rc=124) ")) == 1,
          "the timed-out step noted", summary)
    expect_line(summary, "run.sh: failed: full-bf16",
                "the timed-out step named")
    check(steps[-1] == "profile-fp8", "the steps after it still ran",
          str(steps))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--stub":
        sys.exit(stub(sys.argv[2], sys.argv[3:]))
    for var in ("LINGBOT_SOURCE_ROOT", "LINGBOT_BENCH"):
        if not os.environ.get(var):
            print("%s is not set" % var)
            sys.exit(1)
    test_cards()
    test_failures()
    if FAILURES:
        print("# %d check(s) failed" % len(FAILURES))
        sys.exit(1)


if __name__ == "__main__":
    main()
