#!/usr/bin/env python3
# lingbot-gst: check-doc-text.py's checks on doc trees with one fault each
# (suite docs)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Each case writes a small tree to a temporary directory and expects the
# exact errors; the clean tree expects none.
import importlib.util
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    'check_doc_text', os.path.join(HERE, 'check-doc-text.py'))
cdt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cdt)

failures = 0


def check(what, want, have):
    global failures
    if want == have:
        print(f'ok: {what}')
    else:
        print(f'FAIL: {what}:\n  want {want!r}\n  have {have!r}')
        failures += 1


README = '''# lingbot-gst

Memory: `docs/performance.md`, "GPU procedure"; live: docs/elements.md
"Timestamps", "Latency"; the small model (6.7 MB).

| folder | what lives there |
| --- | --- |
| `tests/` | meson suites: `unit`, `docs` (`doc-text`), `fuzz`; more |
'''

PERFORMANCE = '''# Performance

## GPU procedure (`tests/gpu/run.sh`)
'''

ELEMENTS = '''# Elements

**Timestamps.** Live: PTS = the ready time less the latency.

### Latency
'''

HELP_OK = '''#!/usr/bin/env bash
# x.sh: does x
#
#   ./tools/x.sh [--y]
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
esac
'''

MESON = "test('x', p, suite : 'fuzz')\n"


def tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write(text)


def errors(changes=None, suites=('unit', 'docs', 'fuzz')):
    files = {'README.md': README, 'docs/performance.md': PERFORMANCE,
             'docs/elements.md': ELEMENTS, 'tools/x.sh': HELP_OK,
             'tests/fuzz/meson.build': MESON}
    files.update(changes or {})
    with tempfile.TemporaryDirectory() as root:
        tree(root, files)
        return (cdt.check_retired(root) + cdt.check_refs(root) +
                cdt.check_help(root) + cdt.check_suites(root, set(suites)))


check('a clean tree', [], errors())
# the phrases gst/README.md and docs/zh/README.md had before [3.6]
check('a retired phrase wrapped over two lines',
      ["gst/README.md: retired phrase \"running time at which the chunk's "
       "generation started\" (now: live PTS = ready time less the latency "
       "(docs/elements.md \"Timestamps\"))"],
      errors({'gst/README.md': 'live = the running time at\nwhich the '
              "chunk's generation started, never before\n"}))
check('a retired Chinese phrase',
      ['docs/zh/README.md: retired phrase \'延迟增长到\' (now: the latency '
       'comes back down (docs/elements.md "Latency"))'],
      errors({'docs/zh/README.md': '窗口显示一个块后就要等待，延迟增长到约 7 秒，\n'}))
check('a retired size in a script',
      ["tools/demo.sh: retired phrase '4.6 MB' (now: the demo model is "
       "6.7 MB, DiT dim 128, text dim 64, 3 layers (lingbot-inspect, du -b: "
       "6745583 bytes))"],
      errors({'tools/demo.sh': '# --preset demo --full, 4.6 MB).\n'}))
check('a section that does not exist',
      ['README.md: docs/performance.md, "Memory check": no such section '
       '(heading or **Memory check.**)'],
      errors({'README.md': README.replace('"GPU procedure"',
                                          '"Memory check"')}))
check('the second of two sections does not exist',
      ['README.md: docs/elements.md, "Lateness": no such section '
       '(heading or **Lateness.**)'],
      errors({'README.md': README.replace('"Latency"', '"Lateness"')}))
check('a heading named by its start',
      [], errors({'README.md': README.replace('"GPU procedure"', '"GPU"')}))
check('a section reference from a script',
      ['tools/y.sh: docs/elements.md, "Pacing": no such section (heading or '
       '**Pacing.**)'],
      errors({'tools/y.sh': '# see docs/elements.md "Pacing"\n'}))
check('--help printing set -euo pipefail',
      ["tools/x.sh --help: shell code 'set -euo pipefail'"],
      errors({'tools/x.sh': HELP_OK.replace("'2,/^set -euo/p' \"$0\" | "
                                            "sed '$d'", "'2,5p' \"$0\"")}))
check('--help failing',
      ['tools/x.sh --help: exit status 1'],
      errors({'tools/x.sh': HELP_OK.replace('exit 0', 'exit 1')}))
check('a suite the README does not name',
      ['README.md: the `tests/` row does not name suite `leaks` (meson test '
       '--list has it)'],
      errors(suites=('unit', 'docs', 'fuzz', 'leaks')))
check('a suite this build left out, declared in a meson.build',
      [], errors(suites=('unit', 'docs')))
check('a suite nothing declares',
      ['README.md: the `tests/` row names suite `unit`, which no '
       'tests/**/meson.build declares'],
      errors(suites=('docs', 'fuzz')))

sys.exit(1 if failures else 0)
