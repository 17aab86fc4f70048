#!/usr/bin/env python3
# lingbot-gst: what the docs' text says, against the code and each other
# (suite docs)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
#   check-doc-text.py SOURCE_ROOT [BUILD_ROOT]
#
# Fails on
#  - a retired phrase (RETIRED: what the docs said before the code changed)
#    in README.md, gst/README.md, examples/README.md, docs/*.md, docs/*/*.md
#    and tools/*.sh;
#  - a section reference `docs/X.md, "Name"` (also README.md, gst/README.md;
#    several names after one file: `docs/X.md "A", "B"`) in those docs or in
#    tools/*.sh whose names are not a heading of that file (or a run-in
#    heading, **Name.**), or the start of one (`### Name (2026-12-07)`);
#  - with BUILD_ROOT: a test suite that `meson test --list` knows
#    (meson-info/intro-tests.json) and README.md's folder table does not
#    name in its `tests/` row, or one the row names that no
#    tests/**/meson.build declares;
#  - a tools/*.sh with a --help option whose --help output shows a line of
#    shell code (`set -...`, `cd ...`) or does not exit 0.
#
# The checks are functions returning error strings, run on copies with
# known faults by test-check-doc-text.py.
import glob
import json
import os
import re
import subprocess
import sys

# (phrase, what replaced it): each one a doc once said and the code no
# longer does
RETIRED = [
    ("running time at which the chunk's generation started",
     'live PTS = ready time less the latency (docs/elements.md "Timestamps")'),
    ('grown with a latency message',
     'the latency comes back down (docs/elements.md "Latency")'),
    ('latency only grows', 'the latency comes back down'),
    ('延迟增长到', 'the latency comes back down (docs/elements.md "Latency")'),
    ('开始时的运行时间', 'live PTS = ready time less the latency'),
    ('4.6 MB', 'the demo model is 6.7 MB, DiT dim 128, text dim 64, '
     '3 layers (lingbot-inspect, du -b: 6745583 bytes)'),
    ('--full, dim 64', 'the demo model: dim 128, text dim 64, 3 layers'),
    ('rtpvp8pay ! webrtcbin` per browser session',
     'one pipeline per session ending in a tee, and a `queue ! webrtcbin` '
     'branch per browser (docs/webrtc.md)'),
    ('--devices cpu:2\n# then open',
     'the by-hand lingbot-webrtc-server command sets a small size '
     '(--set width=64 --set height=64): 832x464 takes ~30 s a chunk on '
     'two cores'),
]


def docs(root):
    found = ['README.md', 'gst/README.md', 'examples/README.md']
    found += sorted(os.path.relpath(p, root) for p in
                    glob.glob(os.path.join(root, 'docs', '*.md')) +
                    glob.glob(os.path.join(root, 'docs', '*', '*.md')))
    return [d for d in found if os.path.exists(os.path.join(root, d))]


def read(root, rel):
    with open(os.path.join(root, rel), encoding='utf-8') as f:
        return f.read()


def flat(text):
    """@text with each line break and the indentation after it one space,
    so that a phrase wrapped over two lines is found"""
    return re.sub(r'\s*\n\s*', ' ', text)


def check_retired(root):
    errors = []
    for d in docs(root) + sorted(
            os.path.relpath(p, root)
            for p in glob.glob(os.path.join(root, 'tools', '*.sh'))):
        text = read(root, d)
        for phrase, now in RETIRED:
            if '\n' in phrase:
                hit = re.search(re.escape(phrase).replace(r'\n', r'\s+'),
                                text)
            else:
                hit = phrase in text or phrase in flat(text)
            if hit:
                errors.append(f'{d}: retired phrase {phrase!r} (now: {now})')
    return errors


REF = re.compile(r'((?:docs/[\w/.-]+|gst/README|README|examples/README)\.md)'
                 r'`?\]?(?:\([^)]*\))?,? ((?:"[^"\n]+"(?:, | and )?)+)')
HEADING = re.compile(r'^#+\s+(.*?)\s*#*\s*$', re.M)
RUNIN = re.compile(r'\*\*([^*\n]+?)\.?\*\*')


def anchors(text):
    names = set()
    for h in HEADING.findall(text):
        names.add(h.replace('`', '').strip())
    for r in RUNIN.findall(text):
        names.add(r.replace('`', '').strip())
    return names


def resolves(name, names):
    """whether @name is one of @names or the start of one, up to what
    follows it in a heading (` (...)`, `: ...`, `, ...`)"""
    return any(n == name or (n.startswith(name) and
                             not n[len(name)].isalnum()) for n in names)


def check_refs(root):
    errors = []
    sources = docs(root) + sorted(
        os.path.relpath(p, root)
        for p in glob.glob(os.path.join(root, 'tools', '*.sh')))
    cache = {}
    for src in sources:
        for m in REF.finditer(flat(read(root, src))):
            target = m.group(1)
            path = os.path.join(root, target)
            if not os.path.exists(path):
                continue    # a missing file is another check's business
            if target not in cache:
                cache[target] = anchors(read(root, target))
            for name in re.findall(r'"([^"]+)"', m.group(2)):
                if not resolves(name, cache[target]):
                    errors.append(f'{src}: {target}, "{name}": no such '
                                  f'section (heading or **{name}.**)')
    return errors


def meson_suites(build):
    with open(os.path.join(build, 'meson-info', 'intro-tests.json')) as f:
        tests = json.load(f)
    suites = set()
    for t in tests:
        for s in t.get('suite', []):
            suites.add(s.split(':', 1)[-1])
    return suites


def check_suites(root, suites):
    row = [line for line in read(root, 'README.md').split('\n')
           if line.startswith('| `tests/` |')]
    if len(row) != 1:
        return ['README.md: no (or more than one) `tests/` row in the '
                'folder table']
    # the suites are the cell's code spans outside parentheses
    cell = re.sub(r'\([^()]*\)', '', row[0].split('|')[2])
    named = set(re.findall(r'`([\w-]+)`', cell))
    errors = []
    for s in sorted(suites - named):
        errors.append(f'README.md: the `tests/` row does not name suite '
                      f'`{s}` (meson test --list has it)')
    # a suite this build left out (fuzz without libFuzzer, ...) is still
    # one where a meson.build under tests/ names it
    declared = ''
    for mb in glob.glob(os.path.join(root, 'tests', '**', 'meson.build'),
                        recursive=True):
        declared += read(root, os.path.relpath(mb, root))
    for s in sorted(named - suites):
        if f"'{s}'" not in declared:
            errors.append(f'README.md: the `tests/` row names suite `{s}`, '
                          f'which no tests/**/meson.build declares')
    return errors


SHELL = re.compile(r'^\s*(set -|cd |\.\s|source |if |for |while |case |'
                   r'esac|fi$|done$|[A-Za-z_]+=\S*$)')


def check_help(root):
    errors = []
    for script in sorted(glob.glob(os.path.join(root, 'tools', '*.sh'))):
        with open(script) as f:
            if '--help)' not in f.read():
                continue
        rel = os.path.relpath(script, root)
        p = subprocess.run(['bash', script, '--help'], cwd=root, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=60, env=dict(os.environ,
                                                LINGBOT_NO_INSTALL='1'))
        if p.returncode != 0:
            errors.append(f'{rel} --help: exit status {p.returncode}')
        for line in p.stdout.split('\n'):
            if SHELL.match(line):
                errors.append(f'{rel} --help: shell code {line!r}')
    return errors


def main():
    root = sys.argv[1]
    errors = check_retired(root) + check_refs(root) + check_help(root)
    if len(sys.argv) > 2:
        errors += check_suites(root, meson_suites(sys.argv[2]))
    for e in errors:
        print(e)
    print(f'{len(errors)} problems' if errors else 'docs text: OK')
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
