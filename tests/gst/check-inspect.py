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
#         lingbotvaedec lingbotoverlay lingbotbin
#
# With --reference docs/elements.md it also checks the property tables
# there, the one hand-written property reference, against the same
# gst-inspect-1.0 output: each element's section (`## NAME`) has a table
# whose header starts with `| property |`; every property named in it
# (`width / height` names two) must exist with the type, default and
# mutability the table gives, and every property gst-inspect lists must be
# in the table, except GstObject's `name` and `parent` and those a line
# `Inherited from CLASS: \`a\`, \`b\`` of the section names.  A section
# that says "every NAME property" takes NAME's table, plus the rows of its
# own table if it has one (and its own "Inherited from" line).  A
# read-only property (flags: readable) is mutable "read-only"; a boxed
# one has its type's name as type
# ("GstStructure") and "—" as default (gst-inspect-1.0 prints a readable
# boxed property's current value, a structure's fields, not a default).
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


# gst-inspect-1.0 type names -> the docs' short ones
TYPES = {
    'String': 'string',
    'Integer': 'int',
    'Unsigned Integer': 'uint',
    'Integer64': 'int64',
    'Unsigned Integer64': 'uint64',
    'Boolean': 'boolean',
    'Double': 'double',
    'Float': 'float',
    'Fraction': 'fraction',
}

# gst-inspect-1.0's flag line -> the docs' "mutable" column (a line
# without "writable": "read-only")
MUTABLE = {
    'changeable only in NULL or READY state': 'READY',
    'changeable in NULL, READY, PAUSED or PLAYING state': 'PLAYING',
}

ALWAYS_INHERITED = {'name', 'parent'}


def inspect_properties(text):
    """{name: {'type', 'default', 'mutable'}} from gst-inspect-1.0 output."""
    props = {}
    in_props = False
    current = None
    for line in text.splitlines():
        if line.startswith('Element Properties:'):
            in_props = True
            continue
        if not in_props:
            continue
        if line and not line.startswith(' '):
            break
        m = re.match(r'^  (\S+)\s+: ', line)
        if m:
            current = {'type': None, 'default': None, 'mutable': None}
            props[m.group(1)] = current
            continue
        if current is None:
            continue
        body = line.strip()
        if body.startswith('flags:'):
            for flag, col in MUTABLE.items():
                if flag in body:
                    current['mutable'] = col
            if 'writable' not in body:
                current['mutable'] = 'read-only'
            continue
        # a boxed property: 'Boxed pointer of type "GstStructure"' -> type
        # GstStructure, default "—" (the current value follows, not a
        # default)
        m = re.match(r'^Boxed pointer of type "([^"]+)"', body)
        if m and current['type'] is None:
            current['type'] = m.group(1)
            current['default'] = '—'
            continue
        # an enum: 'Enum "GstLingbotPrecision" Default: 0, "fp32"' -> type
        # enum, default the nick as the docs write it ("fp32")
        m = re.match(r'^Enum "[^"]+" Default: -?\d+, ("[^"]*")', body)
        if m and current['type'] is None:
            current['type'] = 'enum'
            current['default'] = m.group(1)
            continue
        m = re.match(r'^([A-Za-z][A-Za-z0-9 ]*?)\.\s', body + ' ')
        if m and current['type'] is None and m.group(1) in TYPES:
            current['type'] = TYPES[m.group(1)]
            d = re.search(r'Default:\s*(.*)$', body)
            if d:
                current['default'] = d.group(1).strip()
    return props


def split_row(line):
    return [c.strip() for c in line.strip().strip('|').split('|')]


def reference_sections(path):
    """{element: {'table': {prop: {column: cell}} or None,
    'inherited': set, 'text': str}} from docs/elements.md."""
    sections = {}
    name = None
    lines = []
    with open(path) as f:
        text = f.read()
    for line in text.splitlines() + ['## end']:
        m = re.match(r'^## (\S+)\s*$', line)
        if m:
            if name is not None:
                sections[name] = parse_section(lines)
            name = m.group(1)
            lines = []
        else:
            lines.append(line)
    return sections


def parse_section(lines):
    table = None     # the section's first property table
    header = None    # its column names while reading its rows
    inherited = set()
    for line in lines:
        if table is None and re.match(r'^\|\s*property\s*\|', line):
            header = split_row(line)
            table = {}
            continue
        if header is not None:
            if not line.startswith('|'):
                header = None
            else:
                cells = split_row(line)
                if set(''.join(cells)) <= set('-: '):
                    continue  # the |---| line
                row = dict(zip(header, cells))
                for n in row['property'].split('/'):
                    table[n.strip().strip('`')] = row
                continue
        m = re.match(r'^Inherited from \w+: (.*)$', line)
        if m:
            inherited.update(re.findall(r'`([^`]+)`', m.group(1)))
    return {'table': table, 'inherited': inherited,
            'text': '\n'.join(lines)}


def norm_default(value, typ):
    """A comparable form of a default, from gst-inspect or the docs."""
    v = value.strip().strip('`')
    if typ != 'string':
        # "399360 (480*832)", "2^64-1 (measured)": the value before the note
        v = re.sub(r'\s*\(.*\)$', '', v)
        m = re.match(r'^(\d+)\^(\d+)(?:-(\d+))?$', v)
        if m:
            v = str(int(m.group(1)) ** int(m.group(2)) - int(m.group(3) or 0))
    if v in ('NULL', 'null'):
        return None
    try:
        if typ in ('int', 'uint', 'int64', 'uint64'):
            return int(v)  # exact: 2^64-1 is not a double
        if typ in ('double', 'float'):
            return float(v)
    except ValueError:
        return v
    if typ == 'boolean':
        return v.lower()
    return v


def check_reference(path, got, names):
    """Errors (strings) of docs/elements.md's property tables against the
    gst-inspect-1.0 output of each element in got ({name: text})."""
    errors = []
    sections = reference_sections(path)
    for name in names:
        if name not in got or got[name] is None:
            continue
        if 'Element Properties:' not in got[name]:
            continue  # the plugin's own page
        sec = sections.get(name)
        if sec is None:
            errors.append('%s: no "## %s" section' % (path, name))
            continue
        table, inherited = sec['table'], set(sec['inherited'])
        m = re.search(r'every (\w+) property', sec['text'])
        if m and m.group(1) != name and m.group(1) in sections and \
                sections[m.group(1)]['table'] is not None:
            # NAME's table, plus the section's own rows (if any)
            merged = dict(sections[m.group(1)]['table'])
            merged.update(table or {})
            table = merged
        elif table is None:
            errors.append('%s: section %s has no property table' %
                          (path, name))
            continue
        props = inspect_properties(got[name])
        for prop, row in table.items():
            where = '%s: %s property %s' % (path, name, prop)
            if prop not in props:
                errors.append('%s: not in gst-inspect-1.0 %s' % (where, name))
                continue
            have = props[prop]
            typ = row.get('type')
            if typ is not None and typ != have['type']:
                errors.append('%s: type %s, gst-inspect-1.0 says %s' %
                              (where, typ, have['type']))
            want_default = row.get('default')
            if want_default is not None and \
                    norm_default(want_default, have['type']) != \
                    norm_default(have['default'] or 'null', have['type']):
                errors.append('%s: default %s, gst-inspect-1.0 says %s' %
                              (where, want_default, have['default']))
            mut = row.get('mutable')
            if mut is not None and mut != have['mutable']:
                errors.append('%s: mutable %s, gst-inspect-1.0 says %s' %
                              (where, mut, have['mutable']))
        for prop in sorted(props):
            if prop in table or prop in ALWAYS_INHERITED or prop in inherited:
                continue
            errors.append('%s: %s property %s (gst-inspect-1.0) is not in '
                          'its table' % (path, name, prop))
    return errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--gst-inspect', default='gst-inspect-1.0')
    ap.add_argument('--docs', required=True,
                    help='directory of the checked-in copies')
    ap.add_argument('--update', action='store_true',
                    help='rewrite the copies instead of comparing')
    ap.add_argument('--reference',
                    help='docs/elements.md: check its property tables too')
    ap.add_argument('names', nargs='+')
    args = ap.parse_args()
    update = args.update or os.environ.get('LINGBOT_UPDATE_DOCS') == '1'

    failed = False
    outputs = {}
    for name in args.names:
        got = inspect(args.gst_inspect, name)
        outputs[name] = got
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
    if args.reference:
        errors = check_reference(args.reference, outputs, args.names)
        for e in errors:
            sys.stderr.write(e + '\n')
        if errors:
            failed = True
            sys.stderr.write('\n%s: its property tables differ from '
                             'gst-inspect-1.0 (above)\n' % args.reference)
        else:
            print('%s: property tables match gst-inspect-1.0' %
                  args.reference)
    if failed and not update:
        sys.stderr.write('\nUpdate docs/elements.md, then regenerate the '
                         'copies: LINGBOT_UPDATE_DOCS=1 meson test -C BUILD '
                         '--suite docs\n')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
