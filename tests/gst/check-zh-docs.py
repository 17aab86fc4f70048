#!/usr/bin/env python3
# lingbot-gst: the Chinese docs (docs/zh/) against the English ones (suite
# docs)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
#   check-zh-docs.py SOURCE_ROOT
#
# docs/zh/ translates parts of README.md, docs/elements.md and
# docs/performance.md; commands, element names and property names stay
# verbatim.  This fails when they drift apart:
#
#  - every command line of a code block (fenced, or indented by 4 spaces) in
#    a Chinese file is a command line of a code block of its English file
#    (whitespace runs count as one space; a trailing "# comment" is dropped
#    on both sides, so comments may be translated);
#  - every inline code span of a Chinese file occurs in its English file
#    (whitespace runs count as one space);
#  - docs/zh/elements.md's property tables (a table whose first header cell
#    is 属性, in the section `## ELEMENT`): every property named exists in
#    docs/elements.md's table for that element and in gst-inspect-1.0's
#    output for it (the checked-in copies docs/elements/ELEMENT.txt, which
#    the test `elements` keeps equal to gst-inspect-1.0), with the type,
#    default and mutability of the English table; every property of the
#    English table is in the Chinese one; the names of a line
#    `继承自 CLASS：...` are gst-inspect-1.0 properties and the same set as
#    the English `Inherited from` line;
#  - in the code blocks and code spans of every Chinese file, each
#    `name=value` after a lingbot element's name (up to the next `!`) is a
#    property of that element in gst-inspect-1.0's output.
#
# Each check is a function returning error strings, used by
# tests/gst/test-check-zh-docs.py on copies with known drift.
import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

ELEMENTS = ['lingbotcontrolsrc', 'lingbotgen', 'lingbotvaedec', 'lingbotbin']

# (Chinese file, its English original), relative to the source root
PAIRS = [
    ('docs/zh/README.md', 'README.md'),
    ('docs/zh/elements.md', 'docs/elements.md'),
    ('docs/zh/performance.md', 'docs/performance.md'),
]


def _load_check_inspect():
    spec = importlib.util.spec_from_file_location(
        'check_inspect', os.path.join(HERE, 'check-inspect.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ci = _load_check_inspect()


def read(path):
    with open(path, encoding='utf-8') as f:
        return f.read()


def squash(s):
    return re.sub(r'\s+', ' ', s).strip()


def split_blocks(text):
    """(code, prose): code = [(lineno, line)] of the lines inside fenced or
    4-space indented code blocks; prose = the text with those lines
    blanked (line numbers kept)."""
    code = []
    prose = []
    fence = None
    prev_blank = True
    in_indented = False
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r'^\s*(```+|~~~+)', line)
        if fence is None and m:
            fence = m.group(1)
            prose.append('')
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            else:
                code.append((n, line))
            prose.append('')
            prev_blank = False
            continue
        if line.startswith('    ') and line.strip() and \
                (prev_blank or in_indented):
            in_indented = True
            code.append((n, line))
            prose.append('')
            prev_blank = False
            continue
        if line.strip():
            in_indented = False
        prev_blank = not line.strip()
        prose.append(line)
    return code, '\n'.join(prose)


def command_line(line):
    """A code line as compared: no trailing comment, whitespace squashed."""
    line = re.sub(r'(^|\s+)#(\s.*)?$', '', line)
    return squash(line)


def check_commands(zh, en):
    """Code-block lines of zh that are not code-block lines of en."""
    en_code, _ = split_blocks(read(en))
    have = {command_line(l) for _, l in en_code}
    errors = []
    zh_code, _ = split_blocks(read(zh))
    for n, line in zh_code:
        c = command_line(line)
        if c and c not in have:
            errors.append('%s:%d: command line not in %s: %s' % (zh, n, en, c))
    return errors


def code_spans(prose):
    """[(lineno, span)] of the inline code spans of prose."""
    spans = []
    for m in re.finditer(r'(`+)(.+?)\1', prose, re.S):
        spans.append((prose.count('\n', 0, m.start()) + 1,
                      squash(m.group(2))))
    return spans


def check_spans(zh, en):
    """Inline code spans of zh that do not occur in en."""
    en_text = squash(read(en))
    _, prose = split_blocks(read(zh))
    errors = []
    for n, span in code_spans(prose):
        if span and span not in en_text:
            errors.append('%s:%d: code `%s` is not in %s' % (zh, n, span, en))
    return errors


def zh_sections(path):
    """{element: {'table': {prop: row} or None, 'inherited': set}} of the
    `## NAME` sections of a Chinese elements file (header cell 属性)."""
    sections = {}
    name, lines = None, []
    for line in read(path).splitlines() + ['## end']:
        m = re.match(r'^## (\S+)\s*$', line)
        if m:
            if name is not None:
                sections[name] = parse_zh_section(lines)
            name, lines = m.group(1), []
        else:
            lines.append(line)
    return sections


def parse_zh_section(lines):
    table, header, inherited = None, None, None
    for line in lines:
        if table is None and re.match(r'^\|\s*属性\s*\|', line):
            header = ci.split_row(line)
            table = {}
            continue
        if header is not None:
            if not line.startswith('|'):
                header = None
            else:
                cells = ci.split_row(line)
                if set(''.join(cells)) <= set('-: '):
                    continue
                row = dict(zip(header, cells))
                for n in row['属性'].split('/'):
                    table[n.strip().strip('`')] = row
                continue
        m = re.match(r'^继承自 (\w+)[：:](.*)$', line)
        if m:
            inherited = (inherited or set()) | set(
                re.findall(r'`([^`]+)`', m.group(2)))
    return {'table': table, 'inherited': inherited}


# the Chinese header cells -> docs/elements.md's
COLUMNS = [('类型', 'type'), ('默认值', 'default'), ('mutable', 'mutable')]


def inspect_copies(inspect_dir):
    props = {}
    for name in ELEMENTS:
        props[name] = ci.inspect_properties(
            read(os.path.join(inspect_dir, name + '.txt')))
    return props


def check_elements(zh, en, inspect_dir):
    """docs/zh/elements.md's property tables against docs/elements.md's and
    gst-inspect-1.0's (the copies in inspect_dir)."""
    errors = []
    zs = zh_sections(zh)
    es = ci.reference_sections(en)
    props = inspect_copies(inspect_dir)
    for name in ELEMENTS:
        if name not in zs:
            errors.append('%s: no "## %s" section' % (zh, name))
            continue
        z = zs[name]
        e = es.get(name, {'table': None, 'inherited': set()})
        ztab, etab = z['table'], e['table']
        if ztab is None:
            if etab is not None:
                errors.append('%s: section %s has no property table (%s has '
                              'one)' % (zh, name, en))
            ztab = {}
        for prop, row in ztab.items():
            where = '%s: %s property %s' % (zh, name, prop)
            if etab is not None and prop not in etab:
                errors.append('%s: not in the table of %s' % (where, en))
            if prop not in props[name]:
                errors.append('%s: not in gst-inspect-1.0 %s' % (where, name))
            if etab is None or prop not in etab:
                continue
            for zcol, ecol in COLUMNS:
                zv, ev = row.get(zcol), etab[prop].get(ecol)
                if zv is not None and ev is not None and zv != ev:
                    errors.append('%s: %s %s, %s says %s' %
                                  (where, ecol, zv, en, ev))
        if etab is not None:
            for prop in etab:
                if prop not in ztab:
                    errors.append('%s: %s property %s (%s) is not in its '
                                  'table' % (zh, name, prop, en))
        zinh = z['inherited'] or set()
        for prop in sorted(zinh):
            if prop not in props[name]:
                errors.append('%s: %s: inherited %s is not in gst-inspect-1.0 '
                              '%s' % (zh, name, prop, name))
        for prop in sorted(set(e['inherited']) - zinh):
            errors.append('%s: %s: inherited %s (%s) is not named' %
                          (zh, name, prop, en))
    return errors


def launch_texts(path):
    """[(lineno, text)]: the code blocks' commands (continuation lines
    joined) and the code spans of a file."""
    code, prose = split_blocks(read(path))
    out = []
    cur, start = '', None
    for n, line in code:
        c = command_line(line)
        if start is None:
            start = n
        if c.endswith('\\'):
            cur += c[:-1] + ' '
            continue
        out.append((start, cur + c))
        cur, start = '', None
    if start is not None:
        out.append((start, cur))
    out.extend(code_spans(prose))
    return out


def check_launch(zh, inspect_dir):
    """`name=value` after a lingbot element (up to the next !) that is not
    one of its properties."""
    props = inspect_copies(inspect_dir)
    errors = []
    for n, text in launch_texts(zh):
        for segment in text.split('!'):
            element = None
            for word in segment.split():
                if word in props:
                    element = word
                    continue
                m = re.match(r'^([a-z][a-z0-9-]*)=', word)
                if element and m and m.group(1) not in props[element] and \
                        m.group(1) not in ci.ALWAYS_INHERITED:
                    errors.append('%s:%d: %s has no property %s '
                                  '(gst-inspect-1.0)' %
                                  (zh, n, element, m.group(1)))
    return errors


def check_all(root):
    errors = []
    here = os.getcwd()
    os.chdir(root)  # paths in the messages relative to the source root
    try:
        for zh, en in PAIRS:
            if not os.path.exists(zh):
                errors.append('%s: missing (the Chinese %s)' % (zh, en))
                continue
            errors += check_commands(zh, en)
            errors += check_spans(zh, en)
            errors += check_launch(zh, 'docs/elements')
        if os.path.exists('docs/zh/elements.md'):
            errors += check_elements('docs/zh/elements.md',
                                     'docs/elements.md', 'docs/elements')
    finally:
        os.chdir(here)
    return errors


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, '..',
                                                              '..')
    errors = check_all(root)
    for e in errors:
        sys.stderr.write(e + '\n')
    if errors:
        sys.stderr.write('\ndocs/zh/ differs from the English docs (above): '
                         'keep commands, element and property names '
                         'verbatim, and update the Chinese tables when the '
                         'English ones change\n')
        return 1
    print('docs/zh: commands, code and property names match the English '
          'docs')
    return 0


if __name__ == '__main__':
    sys.exit(main())
