#!/usr/bin/env python3
# lingbot-gst: check-doc-commands.py's checks on docs with one fault each
# (suite docs)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# LINGBOT_SOURCE_ROOT names the source root.  Each case writes a small doc
# tree to a temporary directory and expects the exact errors; the clean
# case expects none.
import importlib.util
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    'check_doc_commands', os.path.join(HERE, 'check-doc-commands.py'))
cdc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cdc)

failures = 0


def check(what, want, have):
    global failures
    if want == have:
        print(f'ok: {what}')
    else:
        print(f'FAIL: {what}:\n  want {want!r}\n  have {have!r}')
        failures += 1


def errors_of(doc_text, script_text=None):
    """parse() and check_recipes() errors of a tree holding README.md with
    @doc_text (and tools/x.sh with @script_text)."""
    with tempfile.TemporaryDirectory() as root:
        os.mkdir(os.path.join(root, 'docs'))
        os.mkdir(os.path.join(root, 'tools'))
        with open(os.path.join(root, 'README.md'), 'w') as f:
            f.write(doc_text)
        if script_text is not None:
            with open(os.path.join(root, 'tools', 'x.sh'), 'w') as f:
                f.write(script_text)
        blocks, errors = cdc.parse('README.md', doc_text)
        for b in blocks:
            if b.marker and b.marker[0] == 'small':
                errors += cdc.substitutions(b)[1]
        return errors + cdc.check_recipes(root, ['README.md']), blocks


CLEAN = '''# doc

```sh
./tools/demo.sh --model-only
```

<!-- doc-commands: small: width=416 => width=64 -->
```sh
gst-launch-1.0 lingbotgen model-path=demo-out/demo-model width=416 ! fakesink
```

<!-- doc-commands: skip: a window -->
```sh
gst-launch-1.0 videotestsrc ! autovideosink
```

    lingbotcontrolsrc ! lingbotgen ! lingbotvaedec
'''

errors, blocks = errors_of(CLEAN)
check('a clean doc: no error', [], errors)
check('its blocks: line, language, marker',
      [(3, 'sh', None), (8, 'sh', ('small', 'width=416 => width=64')),
       (13, 'sh', ('skip', 'a window'))],
      [(b.line, b.lang, b.marker) for b in blocks])
check('a small marker: its pairs', [('width=416', 'width=64')],
      cdc.substitutions(blocks[1])[0])

check('a command in an indented block',
      ["README.md:3: a command in an indented block, not run by this test: "
       "fence it as ```sh ('build/tools/lingbot-generate -m demo-out/demo-"
       "model')"],
      errors_of('# doc\n\n    build/tools/lingbot-generate -m '
                'demo-out/demo-model\n')[0])

check('another recipe in a code block, the model used before the recipe',
      ["README.md:3: another small-model recipe ('build/tools/lingbot-mkmodel "
       "--preset demo --full --out demo-out/demo-m'): use ./tools/demo.sh "
       "--model-only",
       "README.md:3: uses demo-out/demo-model before the doc runs "
       "./tools/demo.sh --model-only in a block of its own"],
      errors_of('# doc\n\n```sh\nbuild/tools/lingbot-mkmodel --preset demo '
                '--full --out demo-out/demo-model\n```\n')[0])

check('/tmp/tiny in a script',
      ['tools/x.sh:2: /tmp/tiny: the small model is demo-out/demo-model '
       '(./tools/demo.sh --model-only)'],
      errors_of('# doc\n', '#!/bin/sh\nmodel=/tmp/tiny\n')[0])

check('the recipe only in a skipped block does not count',
      ['README.md:8: uses demo-out/demo-model before the doc runs '
       './tools/demo.sh --model-only in a block of its own'],
      errors_of('# doc\n\n<!-- doc-commands: skip: no -->\n```sh\n'
                './tools/demo.sh --model-only\n```\n\n```sh\n'
                'ls demo-out/demo-model\n```\n')[0])

check('a small marker whose text is not in the block',
      ["README.md:7: small: 'frames=77' is not in the block"],
      errors_of('# doc\n\n```sh\n./tools/demo.sh --model-only\n```\n'
                '<!-- doc-commands: small: frames=77 => frames=29 -->\n'
                '```sh\necho frames=13\n```\n')[0])

check('a malformed marker',
      ["README.md:2: malformed marker '<!-- doc-commands: skipped -->' "
       "(<!-- doc-commands: skip: WHY --> or <!-- doc-commands: small: A => "
       "B; ... -->)"],
      errors_of('# doc\n<!-- doc-commands: skipped -->\n```sh\ntrue\n'
                '```\n')[0])

# the real docs: no error before anything runs (the test doc-commands
# runs them)
root = os.environ['LINGBOT_SOURCE_ROOT']
errs = cdc.check_recipes(root, cdc.DOCS)
for doc in cdc.DOCS:
    with open(os.path.join(root, doc)) as f:
        errs += cdc.parse(doc, f.read())[1]
check("the project's docs pass the static checks", [], errs)

sys.exit(1 if failures else 0)
