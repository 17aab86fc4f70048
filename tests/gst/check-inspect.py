#!/usr/bin/env python3
# lingbot-gst: docs/elements/<element>.txt against gst-inspect-1.0 (suite docs)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Runs `gst-inspect-1.0 ELEMENT` on the build tree's plugin (GST_PLUGIN_PATH,
# set by tests/gst/meson.build) for the plugin and each element, normalises
# the lines that vary between builds (the plugin's file name and directory,
# its version, pointers, trailing blanks) and compares with the checked-in
# copy.  A difference means docs/elements.md and docs/elements/*.txt are out
# of date.  To regenerate the copies (then review docs/elements.md):
#
#     LINGBOT_UPDATE_DOCS=1 meson test -C BUILD --suite docs
#
# or  meson devenv -C BUILD python3 tests/gst/check-inspect.py --update \
#         --docs docs/elements lingbot lingbotcontrolsrc lingbotgen \
#         lingbotvaedec lingbotbin
import argparse
import difflib
import os
import re
import subprocess
import sys


def normalise(text):
    out = []
    for line in text.splitlines():
        line = line.rstrip()
        m = re.match(r'^(\s*Filename\s+)(\S.*)$', line)
        if m:
            line = m.group(1) + '<plugin-dir>/' + os.path.basename(m.group(2))
        m = re.match(r'^(\s*Version\s+)(\S.*)$', line)
        if m:
            line = m.group(1) + '<version>'
        line = re.sub(r'0x[0-9a-fA-F]{6,}', '0x<address>', line)
        out.append(line)
    while out and out[-1] == '':
        out.pop()
    return '\n'.join(out) + '\n'


def inspect(gst_inspect, name):
    env = dict(os.environ)
    env['GST_INSPECT_NO_COLORS'] = '1'
    env['PAGER'] = 'cat'
    env.setdefault('LC_ALL', 'C')
    res = subprocess.run([gst_inspect, '--no-colors', name], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, timeout=120)
    if res.returncode != 0:
        sys.stderr.write('%s %s failed (%d):\n%s\n' %
                         (gst_inspect, name, res.returncode, res.stderr))
        return None
    return normalise(res.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--gst-inspect', default='gst-inspect-1.0')
    ap.add_argument('--docs', required=True,
                    help='directory of the checked-in copies')
    ap.add_argument('--update', action='store_true',
                    help='rewrite the copies instead of comparing')
    ap.add_argument('names', nargs='+')
    args = ap.parse_args()
    update = args.update or os.environ.get('LINGBOT_UPDATE_DOCS') == '1'

    failed = False
    for name in args.names:
        got = inspect(args.gst_inspect, name)
        if got is None:
            failed = True
            continue
        path = os.path.join(args.docs, name + '.txt')
        if update:
            with open(path, 'w') as f:
                f.write(got)
            print('wrote %s' % path)
            continue
        try:
            with open(path) as f:
                want = f.read()
        except OSError as e:
            sys.stderr.write('%s: %s\n' % (path, e))
            failed = True
            continue
        if got != want:
            failed = True
            sys.stderr.write('%s differs from gst-inspect-1.0 %s:\n' %
                             (path, name))
            sys.stderr.writelines(difflib.unified_diff(
                want.splitlines(True), got.splitlines(True),
                path, 'gst-inspect-1.0 ' + name))
        else:
            print('%s: up to date' % path)
    if failed and not update:
        sys.stderr.write('\nUpdate docs/elements.md, then regenerate the '
                         'copies: LINGBOT_UPDATE_DOCS=1 meson test -C BUILD '
                         '--suite docs\n')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
