#!/usr/bin/env python3
# lingbot-gst: docs/elements.md's Keys table against the code (suite docs)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
#   check-keys.py SOURCE_ROOT
#
# The table lists, per key, every name lingbot_key_from_name() accepts
# (lingbot/control-keys.c, key_names[]) and the key's bit
# (lingbot/control.h, LINGBOT_KEY_X = 1 << n) as "X = 0xNN (N)".  Fails,
# naming the row, when a name is missing on either side (compared without
# regard to case, as the code compares them) or a value differs.
import os
import re
import sys


def code_bits(root):
    with open(os.path.join(root, 'lingbot', 'control.h')) as f:
        text = f.read()
    return {m.group(1): 1 << int(m.group(2)) for m in
            re.finditer(r'LINGBOT_KEY_([A-Z])\s*=\s*1\s*<<\s*(\d+)', text)}


def code_names(root):
    with open(os.path.join(root, 'lingbot', 'control-keys.c')) as f:
        text = f.read()
    table = text[text.index('key_names[] = {'):]
    table = table[:table.index('};')]
    names = {}
    for m in re.finditer(r'\{"([^"]+)",\s*LINGBOT_KEY_([A-Z])\}', table):
        names.setdefault(m.group(2), set()).add(m.group(1).lower())
    return names


def doc_rows(root):
    with open(os.path.join(root, 'docs', 'elements.md')) as f:
        text = f.read()
    section = text[text.index('\n## Keys\n'):]
    section = section[:section.index('\n## ', 1)]
    rows = {}
    for line in section.splitlines():
        m = re.match(r'^\|(.*?)\|\s*([A-Z]) = 0x([0-9a-fA-F]+) \((\d+)\)\s*\|',
                     line)
        if m:
            names = {n.lower() for n in re.findall(r'`([^`]+)`', m.group(1))}
            rows[m.group(2)] = (names, int(m.group(3), 16), int(m.group(4)))
    return rows


def main():
    root = sys.argv[1]
    bits, names, rows = code_bits(root), code_names(root), doc_rows(root)
    errors = []
    if len(bits) != 8 or set(names) != set(bits):
        errors.append('lingbot/control.h has keys %s, control-keys.c names '
                      '%s' % (sorted(bits), sorted(names)))
    for key in sorted(set(bits) | set(rows)):
        if key not in rows:
            errors.append('docs/elements.md Keys: no row for %s' % key)
            continue
        if key not in bits:
            errors.append('docs/elements.md Keys: row %s is no LINGBOT_KEY_'
                          % key)
            continue
        doc_names, hexv, decv = rows[key]
        if hexv != bits[key] or decv != bits[key]:
            errors.append('docs/elements.md Keys: %s = 0x%02x (%d), '
                          'LINGBOT_KEY_%s is %d' %
                          (key, hexv, decv, key, bits[key]))
        want = names.get(key, set())
        for n in sorted(want - doc_names):
            errors.append('docs/elements.md Keys: %s lacks the name %s '
                          '(control-keys.c)' % (key, n))
        for n in sorted(doc_names - want):
            errors.append('docs/elements.md Keys: %s lists %s, which '
                          'lingbot_key_from_name() does not take' % (key, n))
    for e in errors:
        print('FAIL: ' + e)
    if not errors:
        print('ok: docs/elements.md Keys: %d keys, %d names, as the code' %
              (len(rows), sum(len(r[0]) for r in rows.values())))
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
