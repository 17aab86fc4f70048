#!/usr/bin/env python3
# lingbot-gst: the commands the docs show, run at a small size (suite docs)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
#   check-doc-commands.py SOURCE_ROOT BUILD_ROOT [DOC...]
#
# Every ```sh block of README.md, gst/README.md, docs/elements.md,
# docs/webrtc.md and examples/README.md (or of the DOCs named) runs, in the
# order of its doc, with bash -euo pipefail from a directory that looks like
# the source root (a symlink per top-level entry, `build` the build tree; a
# fresh one per doc, so demo-out/ is the doc's own), and must exit 0.  A
# ```python block runs with Debian's /usr/bin/python3 and the environment
# gst/README.md names (GI_TYPELIB_PATH, LD_LIBRARY_PATH =
# build/gst-libs/gst/lingbot, GST_PLUGIN_PATH = build/gst).  A comment on the line before a block's fence changes that:
#
#   <!-- doc-commands: skip: REASON -->   not run (a window, a browser, a
#                                          GPU, the test suite itself)
#   <!-- doc-commands: small: A => B; C => D -->
#                                          run with each text A replaced by
#                                          B (a smaller size), every A
#                                          present
#
# The demo's start photo (mate-backgrounds) stands for tests/data/
# gpu-start.jpg where it is not installed.  The scripts run with
# LINGBOT_NO_INSTALL=1 (tools/deps.sh installs nothing).
#
# It also fails, before running anything, on what keeps a newcomer from
# one small model:
#  - a command in an indented code block (not run: fence it as ```sh);
#  - another small-model recipe in any doc or script (lingbot-mkmodel with
#    --full or --preset demo|tiny in a doc's code, /tmp/tiny, /tmp/demo):
#    the one recipe is `./tools/demo.sh --model-only` (demo-out/demo-model);
#  - a block using demo-out/demo-model before its doc ran the recipe.
#
# The checks are functions returning error strings, run on copies with
# known faults by test-check-doc-commands.py.
import glob
import os
import re
import subprocess
import sys
import tempfile

DOCS = ['README.md', 'gst/README.md', 'docs/elements.md', 'docs/webrtc.md',
        'examples/README.md']
RECIPE = './tools/demo.sh --model-only'
MODEL = 'demo-out/demo-model'
MATE = '/usr/share/backgrounds/mate/nature/GreenMeadow.jpg'
MARKER = re.compile(r'^\s*<!--\s*doc-commands:\s*(skip|small):\s*(.*?)\s*-->\s*$')
FENCE = re.compile(r'^(\s*)```(\w*)\s*$')
# the first word of a shell command in an indented block (a pipeline
# description or a JSON message is not one)
COMMAND = re.compile(r'^([A-Z_][A-Z0-9_]*=\S*\s|\./|build/|tools/|examples/|'
                     r'(meson|ninja|gst-launch-1\.0|gst-inspect-1\.0|apt-get|'
                     r'mkdir|cc|sudo|node|npm|python3|lingbot-[a-z-]+)\s)')


class Block:
    def __init__(self, doc, line, lang, text, marker):
        self.doc, self.line, self.lang, self.text = doc, line, lang, text
        self.marker = marker          # None, ('skip', why) or ('small', subs)

    def where(self):
        return f'{self.doc}:{self.line}'


def parse(doc, text):
    """The fenced code blocks of @text and the errors of its markers and of
    its indented blocks holding commands."""
    blocks, errors = [], []
    lines = text.split('\n')
    i, prev = 0, ''
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            indent, lang = m.group(1), m.group(2)
            start = i + 1
            i += 1
            body = []
            while i < len(lines) and lines[i].strip() != '```':
                ln = lines[i]
                body.append(ln[len(indent):] if ln.startswith(indent) else ln)
                i += 1
            marker = None
            mm = MARKER.match(prev)
            if mm:
                marker = (mm.group(1), mm.group(2))
            elif 'doc-commands' in prev:
                errors.append(f'{doc}:{start - 1}: malformed marker {prev!r} '
                              '(<!-- doc-commands: skip: WHY --> or '
                              '<!-- doc-commands: small: A => B; ... -->)')
            blocks.append(Block(doc, start, lang, '\n'.join(body) + '\n',
                                marker))
            prev = ''
            i += 1
            continue
        if (lines[i].startswith('    ') and not prev.strip() and
                COMMAND.match(lines[i].strip() + ' ')):
            errors.append(f'{doc}:{i + 1}: a command in an indented block, '
                          f'not run by this test: fence it as ```sh '
                          f'({lines[i].strip()[:60]!r})')
        if lines[i].strip():
            prev = lines[i]
        elif not MARKER.match(prev):
            prev = ''
        i += 1
    return blocks, errors


def substitutions(block):
    """The (old, new) pairs of a `small` marker, with errors for a pair
    whose old text is not in the block."""
    pairs, errors = [], []
    for part in block.marker[1].split(';'):
        if '=>' not in part:
            errors.append(f'{block.where()}: small: {part.strip()!r} is not '
                          '"A => B"')
            continue
        old, new = (x.strip() for x in part.split('=>', 1))
        if old not in block.text:
            errors.append(f'{block.where()}: small: {old!r} is not in the '
                          'block')
        pairs.append((old, new))
    return pairs, errors


def check_recipes(root, docs):
    """Errors for every other small-model recipe in the docs and scripts,
    and for a doc that uses the model before its recipe."""
    errors = []
    files = sorted(set(docs) | {os.path.relpath(p, root) for p in
                   glob.glob(os.path.join(root, 'docs', '*.md')) +
                   glob.glob(os.path.join(root, 'examples', '*.sh')) +
                   glob.glob(os.path.join(root, 'tools', '*.sh'))})
    for rel in files:
        with open(os.path.join(root, rel), encoding='utf-8') as f:
            text = f.read()
        for n, ln in enumerate(text.split('\n'), 1):
            for bad in ('/tmp/tiny', '/tmp/demo'):
                if bad in ln:
                    errors.append(f'{rel}:{n}: {bad}: the small model is '
                                  f'{MODEL} ({RECIPE})')
        if not rel.endswith('.md'):
            continue
        blocks, _ = parse(rel, text)
        seen = False
        for b in blocks:
            if b.lang not in ('sh', 'python'):
                continue
            for ln in b.text.split('\n'):
                if 'lingbot-mkmodel' in ln and re.search(
                        r'--full|--preset[ =](demo|tiny)\b', ln):
                    errors.append(f'{b.where()}: another small-model recipe '
                                  f'({ln.strip()[:70]!r}): use {RECIPE}')
            if RECIPE in b.text and not (b.marker and b.marker[0] == 'skip'):
                seen = True
            if MODEL in b.text and not seen and rel in docs:
                errors.append(f'{b.where()}: uses {MODEL} before the doc '
                              f'runs {RECIPE} in a block of its own')
    return errors


def farm(root, build, tmp):
    """A directory standing for the source root: a symlink per top-level
    entry, build the build tree, no demo-out."""
    for name in os.listdir(root):
        if name in ('build', 'demo-out', '.git') or name.startswith('build'):
            continue
        os.symlink(os.path.join(root, name), os.path.join(tmp, name))
    os.symlink(build, os.path.join(tmp, 'build'))
    return tmp


def run_doc(root, build, doc, blocks):
    errors = []
    with tempfile.TemporaryDirectory(prefix='doc-commands-') as tmp:
        here = os.path.join(tmp, 'src')
        os.mkdir(here)
        farm(root, build, here)
        env = dict(os.environ, LINGBOT_NO_INSTALL='1',
                   GST_REGISTRY_1_0=os.path.join(tmp, 'registry.bin'),
                   OMP_NUM_THREADS='2')
        for b in blocks:
            if b.lang not in ('sh', 'python'):
                continue
            if b.marker and b.marker[0] == 'skip':
                print(f'skip {b.where()}: {b.marker[1]}')
                continue
            text = b.text
            if b.marker:
                pairs, _ = substitutions(b)     # checked in main()
                for old, new in pairs:
                    text = text.replace(old, new)
            if not os.path.exists(MATE):
                text = text.replace(MATE, 'tests/data/gpu-start.jpg')
            if b.lang == 'sh':
                argv = ['bash', '-euo', 'pipefail', '-c', text]
                benv = env
            else:
                typelib = os.path.join(build, 'gst-libs', 'gst', 'lingbot',
                                       'GstLingbot-1.0.typelib')
                if not os.path.exists(typelib):
                    print(f'skip {b.where()}: built without introspection')
                    continue
                argv = ['/usr/bin/python3', '-c', text]
                benv = dict(env,
                            GI_TYPELIB_PATH='build/gst-libs/gst/lingbot',
                            LD_LIBRARY_PATH='build/gst-libs/gst/lingbot',
                            GST_PLUGIN_PATH='build/gst')
            print(f'run {b.where()}:\n' + ''.join(
                f'  | {ln}\n' for ln in text.rstrip('\n').split('\n')),
                flush=True)
            p = subprocess.run(argv, cwd=here, env=benv, text=True,
                               stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=600)
            tail = p.stdout[-3000:]
            print(''.join(f'  > {ln}\n' for ln in tail.rstrip('\n')
                          .split('\n')) if tail.strip() else '', end='')
            if p.returncode != 0:
                errors.append(f'{b.where()}: exit {p.returncode}')
    return errors


def main():
    root, build = (os.path.abspath(a) for a in sys.argv[1:3])
    docs = sys.argv[3:] or DOCS
    errors = check_recipes(root, docs)
    parsed = {}
    for doc in docs:
        with open(os.path.join(root, doc), encoding='utf-8') as f:
            parsed[doc], errs = parse(doc, f.read())
        errors += errs
        for b in parsed[doc]:
            if b.marker and b.marker[0] == 'small':
                errors += substitutions(b)[1]
    if errors:
        for e in errors:
            print(f'FAIL: {e}')
        return 1
    for doc in docs:
        errors += run_doc(root, build, doc, parsed[doc])
    for e in errors:
        print(f'FAIL: {e}')
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
