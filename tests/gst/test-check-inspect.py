#!/usr/bin/env python3
# lingbot-gst: check-inspect.py's property-table check on known drift
# (suite docs)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Runs check_reference() of check-inspect.py on the checked-in
# gst-inspect-1.0 copies (docs/elements/*.txt, no plugin needed): the real
# docs/elements.md must give no error, and copies of it with one drift each
# (a property left out, a wrong default, type or mutability, a property that
# does not exist, an inherited one no longer named; a read-only boxed
# property's) must give exactly the expected error.
import importlib.util
import os
import sys
import tempfile

NAMES = ['lingbot', 'lingbotcontrolsrc', 'lingbotgen', 'lingbotvaedec',
         'lingbotoverlay', 'lingbotbin']

# (what to replace in docs/elements.md, with what, the errors expected;
# REF stands for the drifted copy's path)
CASES = [
    ('| precision | enum | "fp32" |', '| precison | enum | "fp32" |', [
        'REF: lingbotgen property precison: not in gst-inspect-1.0 lingbotgen',
        'REF: lingbotgen property precision (gst-inspect-1.0) is not in its '
        'table',
        'REF: lingbotbin property precison: not in gst-inspect-1.0 lingbotbin',
        'REF: lingbotbin property precision (gst-inspect-1.0) is not in its '
        'table',
    ]),
    ('| precision | enum | "fp32" |', '| precision | enum | "bf16" |', [
        'REF: lingbotgen property precision: default "bf16", gst-inspect-1.0 '
        'says "fp32"',
        'REF: lingbotbin property precision: default "bf16", gst-inspect-1.0 '
        'says "fp32"',
    ]),
    ('| seed | uint64 | 42 |', '| seed | uint64 | 43 |', [
        'REF: lingbotgen property seed: default 43, gst-inspect-1.0 says 42',
        'REF: lingbotbin property seed: default 43, gst-inspect-1.0 says 42',
    ]),
    ('| latency | uint64 | 2^64-1 (measured) |',
     '| latency | uint64 | 2^64-2 (measured) |', [
        'REF: lingbotgen property latency: default 2^64-2 (measured), '
        'gst-inspect-1.0 says 18446744073709551615',
        'REF: lingbotbin property latency: default 2^64-2 (measured), '
        'gst-inspect-1.0 says 18446744073709551615',
    ]),
    ('| intrinsics-width | int | 832 |', '| intrinsics-width | uint | 832 |', [
        'REF: lingbotcontrolsrc property intrinsics-width: type uint, '
        'gst-inspect-1.0 says int',
    ]),
    ('| devices | string | NULL | READY |', '| devices | string | NULL | PLAYING |', [
        'REF: lingbotvaedec property devices: mutable PLAYING, gst-inspect-1.0 '
        'says READY',
    ]),
    ('| width / height | int | 0 |', '| width | int | 0 |', [
        'REF: lingbotgen property height (gst-inspect-1.0) is not in its table',
        'REF: lingbotbin property height (gst-inspect-1.0) is not in its table',
    ]),
    ('| summary-interval | uint | 0 |', '| summary-interval | uint | 1 |', [
        'REF: lingbotvaedec property summary-interval: default 1, '
        'gst-inspect-1.0 says 0',
    ]),
    ('| stats | GstStructure | — | read-only |',
     '| stats | GstStructure | — | PLAYING |', [
        'REF: lingbotvaedec property stats: mutable PLAYING, gst-inspect-1.0 '
        'says read-only',
    ]),
    ('| stats | GstStructure | — | | read-only |',
     '| stats | structure | NULL | | read-only |', [
        'REF: lingbotgen property stats: type structure, gst-inspect-1.0 says '
        'GstStructure',
        'REF: lingbotgen property stats: default NULL, gst-inspect-1.0 says —',
        'REF: lingbotbin property stats: type structure, gst-inspect-1.0 says '
        'GstStructure',
        'REF: lingbotbin property stats: default NULL, gst-inspect-1.0 says —',
    ]),
    # lingbotbin's own row beside the proxied lingbotgen table
    ('| overlay | boolean | false | | READY |',
     '| overlay | boolean | true | | READY |', [
        'REF: lingbotbin property overlay: default true, gst-inspect-1.0 '
        'says false',
    ]),
    ('| overlay | boolean | false | | READY | a lingbotoverlay',
     '| overlays | boolean | false | | READY | a lingbotoverlay', [
        'REF: lingbotbin property overlays: not in gst-inspect-1.0 lingbotbin',
        'REF: lingbotbin property overlay (gst-inspect-1.0) is not in its '
        'table',
    ]),
    ('| show-stats | boolean | false | PLAYING |',
     '| show-stats | boolean | false | READY |', [
        'REF: lingbotoverlay property show-stats: mutable READY, '
        'gst-inspect-1.0 says PLAYING',
    ]),
    ('Inherited from GstBin: `async-handling`, `message-forward`.',
     'Inherited from GstBin: `async-handling`.', [
        'REF: lingbotbin property message-forward (gst-inspect-1.0) is not in '
        'its table',
    ]),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.environ.get('LINGBOT_SOURCE_ROOT',
                          os.path.join(here, '..', '..'))
    spec = importlib.util.spec_from_file_location(
        'check_inspect', os.path.join(here, 'check-inspect.py'))
    ci = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ci)

    got = {}
    for n in NAMES:
        with open(os.path.join(root, 'docs', 'elements', n + '.txt')) as f:
            got[n] = f.read()
    ref = os.path.join(root, 'docs', 'elements.md')
    with open(ref) as f:
        text = f.read()

    failed = 0
    errors = ci.check_reference(ref, got, NAMES)
    if errors:
        failed += 1
        print('FAIL: docs/elements.md against docs/elements/*.txt:\n  ' +
              '\n  '.join(errors))
    else:
        print('ok: docs/elements.md matches docs/elements/*.txt')

    with tempfile.TemporaryDirectory() as tmp:
        for i, (old, new, want) in enumerate(CASES):
            if text.count(old) != 1:
                failed += 1
                print('FAIL: case %d: %r is not once in %s' % (i, old, ref))
                continue
            path = os.path.join(tmp, 'elements-%d.md' % i)
            with open(path, 'w') as f:
                f.write(text.replace(old, new))
            have = ci.check_reference(path, got, NAMES)
            want = [w.replace('REF', path) for w in want]
            if have != want:
                failed += 1
                print('FAIL: case %d (%s -> %s):\n  want %s\n  have %s' %
                      (i, old, new, want, have))
            else:
                print('ok: case %d: %d error(s) as expected' % (i, len(want)))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
