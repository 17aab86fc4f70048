#!/usr/bin/env python3
"""lingbot-gst: the code formatter (GStreamer's gst-indent style).

  tools/format.py [--check] [FILE...]

C sources and headers (.c, .h) go through GNU indent with gst-indent's
options (GStreamer's tools/gst-indent: 2-space indent, a space before call
parentheses, braces on the if line, 80 columns, no tabs), twice, as
gst-indent runs it, so that the result is a fixed point.  GNU indent does
not know C99 compound literals: it breaks `(int64_t[2]) { a, b }` after
the brace and loses track of an if/else around one.  So each compound
literal is swapped for an identifier of the same length (its one-line
form) before indent runs and put back, on one line, afterwards.  GLib's
file-scope macro calls (G_DEFINE_*, G_DECLARE_*, any all-caps call at the
start of a line) and the G_GNUC_* attributes after a prototype
would make indent take what follows for old-style parameter declarations
(indenting it): they are hidden the same way (see FILE_MACRO).

C++ and CUDA sources (.cc, .cu, .cuh), which indent cannot parse, go
through clang-format with the repository's .clang-format.

Without FILE: every tracked source file except test data and the fuzz
corpus.  --check changes nothing, prints each file that is not formatted
with the start of its diff, and exits 1 if there is one (the `format` test
of suite lint).  Exits 77 (skip) when indent or clang-format is missing.
"""
import difflib
import os
import re
import shutil
import subprocess
import sys

INDENT_OPTS = [
    "--braces-on-if-line", "--case-brace-indentation0", "--case-indentation2",
    "--braces-after-struct-decl-line", "--line-length80", "--no-tabs",
    "--cuddle-else", "--dont-line-up-parentheses",
    "--continuation-indentation4", "--honour-newlines", "--tab-size8",
    "--indent-level2", "--leave-preprocessor-space",
]

# "(type)" or "(type[n])" right before "{": a compound literal, unless the
# parenthesis belongs to a control statement
LITERAL_START = re.compile(
    r"\((?:const\s+)?(?:struct\s+)?[A-Za-z_]\w*(?:\s*\*)*\s*(?:\[[^\]\n]*\])?\)"
    r"\s*\{")
CONTROL = re.compile(r"\b(?:if|while|for|switch|return|sizeof)\s*$")


def literal_end(text, brace):
    """Index after the '}' matching the '{' at @brace, or -1."""
    depth = 0
    i = brace
    while i < len(text):
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < len(text) and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j
        elif c == "/" and text.startswith("/*", i):
            i = text.find("*/", i + 2)
            if i < 0:
                return -1
            i += 1
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == ";":
            return -1
        i += 1
    return -1


def one_line(literal):
    """The literal on one line: '(type) { a, b }'."""
    flat = re.sub(r"\s+", " ", literal)
    flat = re.sub(r"\)\s*\{\s*", ") { ", flat, count=1)
    flat = re.sub(r"\s*\}$", " }", flat)
    return flat.replace("{ }", "{}")


# macros alone on a line that indent would join with the next declaration
# (G_BEGIN_DECLS typedef ...): hidden as comments while indent runs
DECL_MACROS = ("G_BEGIN_DECLS", "G_END_DECLS")


# Macro calls at the start of a line (G_DEFINE_TYPE (...),
# G_DECLARE_FINAL_TYPE (...), G_DEFINE_AUTOPTR_CLEANUP_FUNC (...), the
# project's DEFINE_SUM (...), LB_OP (name)):
# indent reads `NAME (args)` at file scope as an old-style function
# definition and indents every declaration after it as its parameters, and
# spaces the hyphens of G_DEFINE_QUARK's name.  Each call, with its
# optional semicolon, is hidden as a comment while indent runs and put back
# as it was.
FILE_MACRO = re.compile(r"^(?!G_GNUC_)[A-Z][A-Z0-9_]*\s*\(", re.M)
# G_GNUC_PRINTF (2, 3) and the like after a prototype's ")": indent takes a
# plain identifier there for the start of another old-style definition,
# so each is swapped for an __attribute__ it knows while it runs
GNUC_ATTR = re.compile(r"(\)\s*)(G_GNUC_[A-Z_]+\b(?:\s*\([^()\n]*\))?)")


def hide_file_macros(text, saved):
    out, pos = [], 0
    for m in FILE_MACRO.finditer(text):
        if m.start() < pos:
            continue
        depth, j = 0, m.end() - 1
        while j < len(text):
            if text[j] == "(":
                depth += 1
            elif text[j] == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        end = j + 1
        after = text[end:].lstrip()
        before = text[:m.start()].rstrip()
        # a definition named by a macro (ITEM_NAME (args) {, ROWS_FN (f)
        # (args)) or an initializer (x =\nGST_STATIC_PAD_TEMPLATE (...)):
        # indent reads those right
        if after.startswith(("{", "(")) or before.endswith(("=", ",")):
            continue
        if text.startswith(";", end):
            end += 1
        out.append(text[pos:m.start()])
        out.append("/* LbFmtMacro%d */" % len(saved))
        saved.append(text[m.start():end])
        pos = end
    out.append(text[pos:])
    return "".join(out)


def protect(text):
    """(text with each compound literal and GLib macro replaced, the
    originals)."""
    for macro in DECL_MACROS:
        text = re.sub(r"^%s$" % macro, "/* LbFmt%s */" % macro, text,
                      flags=re.M)
    macros = []
    text = hide_file_macros(text, macros)
    attrs = []

    def attr(m):
        attrs.append(re.sub(r"\s*\(", " (", m.group(2), count=1))
        return m.group(1) + "__attribute__((LbFmtAttr%d))" % (len(attrs) - 1)
    text = GNUC_ATTR.sub(attr, text)
    out, saved, pos = [], [], 0
    for m in LITERAL_START.finditer(text):
        if m.start() < pos or CONTROL.search(text[:m.start()][-12:]):
            continue
        # a function definition's "(void)\n{" is not on one line with a brace
        if "\n" in m.group(0):
            continue
        end = literal_end(text, m.end() - 1)
        if end < 0:
            continue
        flat = one_line(text[m.start():end])
        name = "LbFmtLiteral%d" % len(saved)
        if len(name) > len(flat):
            continue
        out.append(text[pos:m.start()])
        out.append(name + "_" * (len(flat) - len(name)))
        saved.append(flat)
        pos = end
    out.append(text[pos:])
    return "".join(out), (saved, macros, attrs)


def restore(text, hidden):
    saved, macros, attrs = hidden

    def put(m):
        return saved[int(m.group(1))]
    text = re.sub(r"LbFmtLiteral(\d+)_*", put, text)
    text = re.sub(r"__attribute__\s*\(\(LbFmtAttr(\d+)\)\)",
                  lambda m: attrs[int(m.group(1))], text)
    text = re.sub(r"/\* LbFmtMacro(\d+) \*/",
                  lambda m: macros[int(m.group(1))], text)
    for macro in DECL_MACROS:
        text = text.replace("/* LbFmt%s */" % macro, macro)
    return text


def run_indent(text, path):
    for _ in range(2):
        p = subprocess.run([INDENT] + INDENT_OPTS + ["-st"], input=text,
                           capture_output=True, text=True)
        if p.returncode != 0 or p.stderr:
            sys.exit("format: indent failed on %s: %s" % (path,
                                                          p.stderr.strip()))
        text = p.stdout
    return text


def formatted(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith((".c", ".h")):
        # to a fixed point: a macro call that indent indented (after
        # another it misread) reaches column 0, and is protected, one
        # pass later
        out = text
        for _ in range(64):
            hidden, saved = protect(out)
            new = restore(run_indent(hidden, path), saved)
            if new == out:
                break
            out = new
        return text, out
    p = subprocess.run([CLANG_FORMAT, "--style=file", path],
                       capture_output=True, text=True, check=True)
    return text, p.stdout


def main(argv):
    check = bool(argv) and argv[0] == "--check"
    files = argv[1:] if check else argv
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    for tool in (INDENT, CLANG_FORMAT):
        if shutil.which(tool) is None:
            print("format: %s not found (tools/deps.sh installs it)" % tool,
                  file=sys.stderr)
            return 77
    if not files:
        git = subprocess.run(
            ["git", "ls-files", "*.c", "*.h", "*.cc", "*.cu", "*.cuh"],
            capture_output=True, text=True)
        if git.returncode != 0:
            print("format: not a git checkout, no file list", file=sys.stderr)
            return 77
        listed = git.stdout.split()
        files = [f for f in listed if not f.startswith(
            ("tests/data/", "tests/fuzz/corpus/"))]
    others = [f for f in files if not f.endswith(SOURCES)]
    if others:
        # clang-format would take a shell script for C and rewrite it
        print("format: not a C, C++ or CUDA source: %s" % " ".join(others),
              file=sys.stderr)
        return 2
    bad = 0
    for path in files:
        before, after = formatted(path)
        if before == after:
            continue
        if check:
            bad += 1
            print("not formatted: %s (tools/format.py %s)" % (path, path))
            diff = difflib.unified_diff(before.splitlines(), after.splitlines(),
                                        lineterm="", n=1)
            for line in list(diff)[2:12]:
                print("  " + line)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(after)
            print("formatted: " + path)
    if check and bad:
        print("format: %d of %d files are not formatted; run tools/format.py"
              % (bad, len(files)))
        return 1
    return 0


SOURCES = (".c", ".h", ".cc", ".cu", ".cuh")
INDENT = os.environ.get("INDENT", "indent")
CLANG_FORMAT = os.environ.get("CLANG_FORMAT", "clang-format")

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
