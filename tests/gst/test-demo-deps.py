#!/usr/bin/env python3
# lingbot-gst: tools/demo.sh on a minimal Debian 12 plus tools/deps.sh's
# packages, at a small size (suite docs)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
#   test-demo-deps.py SOURCE_ROOT BUILD_ROOT
#
# The README says ./tools/demo.sh works on a fresh Debian 12 once it has
# installed tools/deps.sh's packages.  This runs it with a PATH holding only
# the programs such a machine has: those of the packages Debian 12 always
# has (Essential: yes or Priority: required, as in the debian:12 image),
# of LINGBOT_DEPS and LINGBOT_DEMO_DEPS, and of everything they depend on,
# as dpkg lists them here (exit 77, skipped, without dpkg).  A program of any other package (bc, which
# demo.sh once used, or gst-discoverer-1.0 of gstreamer1.0-plugins-base-
# apps) is not found, and demo.sh fails.  A program demo.sh or its helpers
# name by an absolute path (/usr/bin/python3) must belong to one of those
# packages too.
#
# demo.sh runs from a directory standing for the source root (symlinks,
# `build` the build tree), so that demo-out/ is the test's own, with
# LINGBOT_NO_INSTALL=1, FRAMES=29 WIDTH=64 HEIGHT=64 DEVICES=cpu:1 and
# --image tests/data/gpu-start.jpg; its output must hold the progress line
# of each chunk, the legend and the lingbot-chunk lines (with the decode's
# vae-seconds, not 0), the steady fps, the file's
# duration, size and rate, and no number with more than 3 decimals.
import os
import re
import shutil
import subprocess
import sys
import tempfile

SCRIPTS = ['tools/demo.sh', 'tools/demo-common.sh', 'tools/deps.sh']
failures = 0


def check(what, ok, detail=''):
    global failures
    print(f"{'ok' if ok else 'FAIL'}: {what}" + (f': {detail}' if detail and
                                                 not ok else ''))
    if not ok:
        failures += 1


def installed():
    """{package: (essential, priority, depends)} of the installed packages
    (architecture qualifiers dropped)."""
    out = subprocess.run(
        ['dpkg-query', '-W', '-f',
         '${Package}\t${Essential}\t${Priority}\t${Depends}, '
         '${Pre-Depends}\t${db:Status-Abbrev}\n'],
        check=True, text=True, stdout=subprocess.PIPE).stdout
    pkgs = {}
    for line in out.splitlines():
        name, ess, prio, deps, status = line.split('\t')
        if not status.startswith('ii'):
            continue
        alts = []
        for d in deps.split(','):
            names = [re.sub(r'[:\s(].*', '', a.strip()) for a in d.split('|')]
            alts.append([n for n in names if n])
        pkgs[name] = (ess == 'yes', prio, alts)
    return pkgs


def closure(pkgs, roots):
    """@roots and what they depend on, among the installed packages (of
    alternatives, every one installed: any may be the one apt chose)."""
    seen, todo = set(), [r for r in roots if r in pkgs]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for alts in pkgs[p][2]:
            todo += [a for a in alts if a in pkgs and a not in seen]
    return seen


def deps_lists(root):
    out = subprocess.run(
        ['bash', '-c', '. tools/deps.sh; echo "${LINGBOT_DEPS[*]}"; '
         'echo "${LINGBOT_DEMO_DEPS[*]}"'], cwd=root, check=True, text=True,
        stdout=subprocess.PIPE).stdout.split('\n')
    return out[0].split(), out[1].split()


def programs(packages):
    """{name: path} of the programs in bin/ and sbin/ of @packages."""
    out = subprocess.run(['dpkg', '-L'] + sorted(packages), text=True,
                         stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL).stdout
    progs = {}
    for path in out.splitlines():
        if re.match(r'^/(usr/)?s?bin/[^/]+$', path) and os.path.exists(path):
            progs.setdefault(os.path.basename(path), path)
    return progs


def owner(path):
    p = subprocess.run(['dpkg', '-S', path], text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL)
    if p.returncode != 0 and path.startswith('/usr/'):
        # usrmerge: dpkg knows /bin/x for /usr/bin/x
        p = subprocess.run(['dpkg', '-S', path[4:]], text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return {s.split(':')[0] for s in p.stdout.split('\n')[0].split(': ')[0]
            .split(', ')} if p.returncode == 0 else set()


def main():
    root, build = (os.path.abspath(a) for a in sys.argv[1:3])
    if shutil.which('dpkg-query') is None:
        print('SKIP: no dpkg (the check is for Debian 12)')
        return 77
    pkgs = installed()
    base = [p for p, (ess, prio, _) in pkgs.items()
            if ess or prio == 'required']
    deps, demo_deps = deps_lists(root)
    check('tools/deps.sh lists python3-gi (tools/demo-run.py)',
          'python3-gi' in deps)
    allowed = closure(pkgs, base + deps + demo_deps)
    check('bc is not among the allowed packages here (the check can fail)',
          'bc' not in allowed or 'bc' in deps + demo_deps)
    for rel in SCRIPTS:
        with open(os.path.join(root, rel)) as f:
            text = f.read()
        for path in sorted(set(re.findall(r'(?<![\w.$/-])(/usr/s?bin/[\w.+-]+|'
                                          r'/s?bin/[\w.+-]+)', text))):
            pk = owner(path)
            check(f'{rel}: {path} belongs to an allowed package',
                  bool(pk & allowed), f'owned by {sorted(pk) or "nothing"}')

    with tempfile.TemporaryDirectory(prefix='demo-deps-') as tmp:
        bindir = os.path.join(tmp, 'bin')
        os.mkdir(bindir)
        for name, path in programs(allowed).items():
            os.symlink(path, os.path.join(bindir, name))
        src = os.path.join(tmp, 'src')
        os.mkdir(src)
        for name in os.listdir(root):
            if name in ('.git', 'demo-out') or name.startswith('build'):
                continue
            os.symlink(os.path.join(root, name), os.path.join(src, name))
        os.symlink(build, os.path.join(src, 'build'))
        env = {k: v for k, v in os.environ.items()
               if k in ('HOME', 'LANG', 'OPENBLAS_CORETYPE', 'TMPDIR')}
        env.update(PATH=bindir, LINGBOT_NO_INSTALL='1', FRAMES='29',
                   WIDTH='64', HEIGHT='64', DEVICES='cpu:1',
                   OMP_NUM_THREADS='1',
                   GST_REGISTRY_1_0=os.path.join(tmp, 'registry.bin'))
        p = subprocess.run(['bash', 'tools/demo.sh', '--image',
                            'tests/data/gpu-start.jpg'], cwd=src, env=env,
                           text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=600)
        print(''.join(f'  > {ln}\n' for ln in p.stdout.rstrip().split('\n')))
        check('demo.sh exits 0 with only those programs on the PATH',
              p.returncode == 0, f'exit {p.returncode}')
        out = p.stdout
        want = [
            r'^   chunk 0: 13/29 frames, \d+\.\d s, \d+\.\d\d fps, ETA \d+ s$',
            r'^   chunk 1: 29/29 frames, \d+\.\d s, \d+\.\d\d fps$',
            r'^== per chunk: dit = the DiT\'s 4 \+ 1 passes; compute = ',
            # vae: lingbotvaedec's lingbot-decode of the same chunk, not
            # lingbot-chunk's vae-seconds (always 0)
            r'^   lingbot-chunk 0: 13 frames, keys w, dit \d+\.\d{3} s, '
            r'compute \d+\.\d{3} s, vae (?!0\.000)\d+\.\d{3} s$',
            r'^   lingbot-chunk 1: 16 frames, keys w, dit \d+\.\d{3} s, '
            r'compute \d+\.\d{3} s, vae (?!0\.000)\d+\.\d{3} s$',
            r'^== steady \d+\.\d\d fps \(chunks after the first, compute\)$',
            r'^== wrote demo-out/demo\.mp4 \(\d+ bytes\) in \d+\.\d s$',
            r'^   duration 1\.81 s, 64x64, 16/1 fps$',
        ]
        for w in want:
            check(f'a line {w}', re.search(w, out, re.M) is not None)
        long = re.findall(r'\d+\.\d{4,}', out)
        check('no number with more than 3 decimals', not long, str(long))
        mp4 = os.path.join(src, 'demo-out', 'demo.mp4')
        check('demo-out/demo.mp4 written', os.path.exists(mp4) and
              os.path.getsize(mp4) > 0)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
