#!/usr/bin/env python3
# lingbot-gst: check-zh-docs.py on known drift (suite docs)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The real docs/zh/ must give no error; copies of one Chinese or English
# file with one drift each (a command changed on either side, a property
# renamed, a wrong default, a property added to the English table, a
# launch line with a misspelt property, a code span changed, an inherited
# property no longer named) must give exactly the expected errors.
import importlib.util
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get('LINGBOT_SOURCE_ROOT', os.path.join(HERE, '..', '..'))

spec = importlib.util.spec_from_file_location(
    'check_zh_docs', os.path.join(HERE, 'check-zh-docs.py'))
cz = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cz)

ZH_README, EN_README = 'docs/zh/README.md', 'README.md'
ZH_ELEM, EN_ELEM = 'docs/zh/elements.md', 'docs/elements.md'
ZH_PERF, EN_PERF = 'docs/zh/performance.md', 'docs/performance.md'

# (file to drift, old, new, expected errors); in an expected error ZH and EN
# stand for the (drifted or real) Chinese and English paths of the pair, and
# @TEXT@ for the line number of the first line of the drifted file holding
# TEXT
CASES = [
    (ZH_README, 'ninja -C build\n', 'ninja -C build -j2\n', [
        'ZH:@ninja -C build -j2@: command line not in EN: ninja -C build -j2',
    ]),
    (EN_README, 'meson test -C build --suite unit\n',
     'meson test -C build --suite core\n', [
        'ZH:@meson test -C build --suite unit@: command line not in EN: '
        'meson test -C build --suite unit',
    ]),
    (ZH_README, 'lingbotgen is-live=true preview=true '
     'model-path=demo-out/demo-model',
     'lingbotgen is-live=true preview=true model-pth=demo-out/demo-model', [
        'ZH:@model-pth=@: command line not in EN: gst-launch-1.0 -e '
        'lingbotcontrolsrc is-live=true ! lingbotgen is-live=true '
        'preview=true model-pth=demo-out/demo-model \\',
        'ZH:@model-pth=@: lingbotgen has no property model-pth '
        '(gst-inspect-1.0)',
    ]),
    (ZH_README, '`./tools/test.sh --suite unit`',
     '`./tools/test.sh --suite all`', [
        'ZH:@--suite all@: code `./tools/test.sh --suite all` is not in EN',
    ]),
    (ZH_ELEM, '| model-path | string | NULL | | READY | 模型目录（必需） |',
     '| model-paths | string | NULL | | READY | 模型目录（必需） |', [
        'ZH: lingbotgen property model-paths: not in the table of EN',
        'ZH: lingbotgen property model-paths: not in gst-inspect-1.0 '
        'lingbotgen',
        'ZH: lingbotgen property model-path (EN) is not in its table',
    ]),
    (ZH_ELEM, '| seed | uint64 | 42 |', '| seed | uint64 | 43 |', [
        'ZH: lingbotgen property seed: default 43, EN says 42',
    ]),
    (ZH_ELEM, '| latency | uint64 | 2^64-1 (measured) | ns | PLAYING |',
     '| latency | uint64 | 2^64-1 (measured) | ns | READY |', [
        'ZH: lingbotgen property latency: mutable READY, EN says PLAYING',
    ]),
    (EN_ELEM, '| devices | string | NULL | READY |',
     '| qos | boolean | true | PLAYING | drop late frames |\n'
     '| devices | string | NULL | READY |', [
        'ZH: lingbotvaedec property qos (EN) is not in its table',
    ]),
    (ZH_ELEM, '继承自 GstBin：`async-handling`、`message-forward`。',
     '继承自 GstBin：`async-handling`。', [
        'ZH: lingbotbin: inherited message-forward (EN) is not named',
    ]),
    (ZH_ELEM, '继承自 GstBaseSrc：`blocksize`、',
     '继承自 GstBaseSrc：`blocksize`、`block-size`、', [
        'ZH:@`block-size`@: code `block-size` is not in EN',
        'ZH: lingbotcontrolsrc: inherited block-size is not in '
        'gst-inspect-1.0 lingbotcontrolsrc',
    ]),
    (ZH_PERF, '`--playout-delay S`', '`--playout S`', [
        'ZH:@`--playout S`@: code `--playout S` is not in EN',
    ]),
    (EN_PERF, '    --devices cpu:2 -q -o /tmp/pb/replay-128.json\n',
     '    --devices cpu:1 -q -o /tmp/pb/replay-128.json\n', [
        'ZH:@--devices cpu:2 -q@: command line not in EN: --devices cpu:2 -q '
        '-o /tmp/pb/replay-128.json',
    ]),
]

PAIR = {ZH_README: (ZH_README, EN_README), EN_README: (ZH_README, EN_README),
        ZH_ELEM: (ZH_ELEM, EN_ELEM), EN_ELEM: (ZH_ELEM, EN_ELEM),
        ZH_PERF: (ZH_PERF, EN_PERF), EN_PERF: (ZH_PERF, EN_PERF)}


def run_pair(zh, en, inspect_dir, elements):
    errors = cz.check_commands(zh, en) + cz.check_spans(zh, en) + \
        cz.check_launch(zh, inspect_dir)
    if elements:
        errors += cz.check_elements(zh, en, inspect_dir)
    return errors


def expand(want, zh, en, drifted_text):
    out = []
    for w in want:
        if '@' in w:
            pre, needle, post = w.split('@', 2)
            n = next(i for i, l in enumerate(drifted_text.splitlines(), 1)
                     if needle in l)
            w = '%s%d%s' % (pre, n, post)
        out.append(w.replace('ZH', zh).replace('EN', en))
    return out


def main():
    failed = 0
    errors = cz.check_all(ROOT)
    if errors:
        failed += 1
        print('FAIL: docs/zh/ against the English docs:\n  ' +
              '\n  '.join(errors))
    else:
        print('ok: docs/zh/ matches the English docs')
    inspect_dir = os.path.join(ROOT, 'docs', 'elements')
    with tempfile.TemporaryDirectory() as tmp:
        for i, (which, old, new, want) in enumerate(CASES):
            zh_rel, en_rel = PAIR[which]
            zh, en = os.path.join(ROOT, zh_rel), os.path.join(ROOT, en_rel)
            text = cz.read(os.path.join(ROOT, which))
            if text.count(old) != 1:
                failed += 1
                print('FAIL: case %d: %r is not once in %s' % (i, old, which))
                continue
            drifted = text.replace(old, new)
            path = os.path.join(tmp, 'case-%d-%s' % (i,
                                                    os.path.basename(which)))
            with open(path, 'w', encoding='utf-8') as f:
                f.write(drifted)
            if which == zh_rel:
                zh = path
            else:
                en = path
            have = run_pair(zh, en, inspect_dir, which in (ZH_ELEM, EN_ELEM))
            # the drifted file's text gives the line numbers (the Chinese
            # file's own when the English one drifted)
            lines_of = drifted if which == zh_rel else cz.read(zh)
            want = expand(want, zh, en, lines_of)
            if have != want:
                failed += 1
                print('FAIL: case %d (%s: %r -> %r):\n  want %s\n  have %s' %
                      (i, which, old, new, want, have))
            else:
                print('ok: case %d (%s): %d error(s) as expected' %
                      (i, which, len(want)))
        # a missing Chinese file is an error of check_all
        root = os.path.join(tmp, 'root')
        for rel in ('README.md', 'docs/elements.md', 'docs/performance.md',
                    'docs/zh/README.md', 'docs/zh/elements.md'):
            os.makedirs(os.path.dirname(os.path.join(root, rel)),
                        exist_ok=True)
            shutil.copy(os.path.join(ROOT, rel), os.path.join(root, rel))
        shutil.copytree(inspect_dir, os.path.join(root, 'docs', 'elements'),
                        dirs_exist_ok=True)
        have = cz.check_all(root)
        want = ['docs/zh/performance.md: missing (the Chinese '
                'docs/performance.md)']
        if have != want:
            failed += 1
            print('FAIL: missing docs/zh/performance.md:\n  want %s\n  have %s'
                  % (want, have))
        else:
            print('ok: a missing Chinese file is reported')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
