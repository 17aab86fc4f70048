#!/usr/bin/env python3
# lingbot-gst: tools/lingbot-plot-bench on checked-in lingbot-bench reports (suite
# bench)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The reports in tests/bench/data/ are the unedited output of real runs
# (docs/performance.md, "Chunk timeline plots"): a replay and a direct run
# of the demo model at 128x64 on cpu:2.  Checks that plot-bench writes a PNG
# (signature, IHDR size = --size) for each, for a --compare wrapper (--run)
# and for JSON lines, and that unreadable input gives the exact error on
# stderr, exit status 1 and no PNG.  Exit 77 (skip) when matplotlib is
# missing, after the error cases (they do not need it).
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get('LINGBOT_SOURCE_ROOT', os.path.join(HERE, '..', '..'))
PLOT = os.environ.get('LINGBOT_PLOT_BENCH',
                      os.path.join(ROOT, 'tools', 'lingbot-plot-bench'))
DATA = os.path.join(ROOT, 'tests', 'bench', 'data')
REPLAY = os.path.join(DATA, 'replay-demo-128x64.json')
DIRECT = os.path.join(DATA, 'direct-demo-128x64.json')

failed = 0


def check(ok, what):
    global failed
    print('%s: %s' % ('ok' if ok else 'FAIL', what))
    if not ok:
        failed += 1


def run(*args, stdin=None):
    return subprocess.run([PLOT] + list(args), input=stdin,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)


def png_size(path):
    """(width, height) of a PNG, or None when it is not one."""
    with open(path, 'rb') as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b'\x89PNG\r\n\x1a\n' or \
            head[12:16] != b'IHDR':
        return None
    return struct.unpack('>II', head[16:24])


def expect_error(tmp, name, text, args, message):
    path = os.path.join(tmp, name)
    with open(path, 'w') as f:
        f.write(text)
    out = os.path.join(tmp, name + '.png')
    r = run(path, '-o', out, *args)
    want = 'lingbot-plot-bench: ' + message.replace('PATH', path) + '\n'
    check(r.returncode == 1 and r.stderr == want and
          not os.path.exists(out),
          '%s: exit 1, no PNG, stderr %r (got %d, %r)' %
          (name, want, r.returncode, r.stderr))


def expect_png(tmp, name, args, size, stdin=None):
    out = os.path.join(tmp, name + '.png')
    r = run(*(list(args) + ['-o', out]), stdin=stdin)
    if r.returncode == 3 and 'matplotlib is missing' in r.stderr:
        print('SKIP: %s' % r.stderr.strip())
        sys.exit(77 if not failed else 1)
    got = png_size(out) if os.path.exists(out) else None
    check(r.returncode == 0 and got == size,
          '%s: exit 0, a %dx%d PNG (got %d, %s; stderr %r)' %
          (name, size[0], size[1], r.returncode, got, r.stderr))
    return r


def main():
    with open(REPLAY) as f:
        replay = json.load(f)
    with open(DIRECT) as f:
        direct = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        # the exact errors (no matplotlib needed)
        expect_error(tmp, 'truncated.json', '{"bench": "direct", "chunks": [',
                     [], 'PATH: not valid JSON (Expecting value: line 1 '
                     'column 32 (char 31))')
        expect_error(tmp, 'trailing-comma.json',
                     '{"bench": "replay",\n "chunks": [],\n}\n', [],
                     'PATH: not valid JSON (Expecting property name enclosed '
                     'in double quotes: line 3 column 1 (char 35))')
        lines = json.dumps(direct) + '\n{"round": 0, "a": 1.0,\n'
        expect_error(tmp, 'bad-line.jsonl', lines, [],
                     'PATH: line 2: not valid JSON (Expecting property name '
                     'enclosed in double quotes)')
        expect_error(tmp, 'gemm.json', '{"bench": "gemm", "gflops": 60.1}',
                     [], 'PATH: not a lingbot-bench direct or replay report '
                     '(no object with "bench" "direct" or "replay")')
        expect_error(tmp, 'no-chunks.json', '{"bench": "direct"}', [],
                     'PATH: no "chunks" array')
        broken = json.loads(json.dumps(direct))
        del broken['chunks'][2]['dit_seconds']
        expect_error(tmp, 'no-dit.json', json.dumps(broken), [],
                     'PATH: chunk 2: no number "dit_seconds"')
        cmp = {'bench': 'compare', 'runs': [direct, replay]}
        expect_error(tmp, 'compare-run.json', json.dumps(cmp), ['--run', '2'],
                     'PATH: --run 2: the file holds 2 report(s)')

        # PNGs of the exact requested size
        r = expect_png(tmp, 'replay', [REPLAY, '--size', '800x450'],
                       (800, 450))
        check(r.stdout.strip().endswith('(800x450)') and
              '10 chunks' in r.stdout, 'replay: stdout %r' % r.stdout)
        expect_png(tmp, 'direct', [DIRECT], (1200, 700))
        path = os.path.join(tmp, 'compare.json')
        with open(path, 'w') as f:
            json.dump(cmp, f)
        r = expect_png(tmp, 'compare-run1', [path, '--run', '1'], (1200, 700))
        check('10 chunks' in r.stdout, 'compare --run 1 is the replay (%r)' %
              r.stdout)
        jl = '{"round": 0, "a": 1.0, "b": 1.1, "ratio": 1.1}\n' + \
            json.dumps(direct) + '\n'
        r = expect_png(tmp, 'stdin-jsonl', ['-', '--size', '640x400',
                                            '--playout-delay', '0.5'],
                       (640, 400), stdin=jl)
        check('5 chunks' in r.stdout, 'JSON lines on stdin: the direct '
              'report (%r)' % r.stdout)
    print('%d failed' % failed)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
