#!/usr/bin/python3
# lingbot-gst: check that the layers only call down (docs/design.md)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Reads the sources of gst/, gst-libs/, lingbot/, comm/ and kernels/ and
# builds a
# graph of files: an edge for every `#include "dir/file.h"` and one from a
# source file to the source file that defines a (non-static) function it
# names.  It prints
#
#   - arrows back up: an edge from a lower layer to a higher one
#     (kernels < comm < lingbot < gst-libs < gst), and any include in gst/
#     or gst-libs/ (the GStreamer helper library, included as
#     "gst/lingbot/...") of a library header other than lingbot/lingbot.h
#     (the elements see the application API only);
#   - circles: groups of source files that reach each other (strongly
#     connected components of the graph, two files or more);
#   - breaches of the public API (docs/design.md "The public API"): a
#     public header (lingbot/lingbot.h and the lingbot/ headers it may
#     include, PUBLIC_HEADERS) that includes anything but GLib, GIO, a
#     standard C header (lingbot.h itself: GLib and GIO alone) or another
#     public header; a function a public header declares without a
#     gtk-doc block; an engine identifier (Lb*, lb_*, LB_*) in the gtk-doc
#     of a function a public header declares (its errors are
#     LINGBOT_ERROR_*, the LB_ERROR_* codes' public names); one in the code of
#     gst/ or gst-libs/; a call from gst/ or gst-libs/ to a liblingbot
#     function that no public header declares.
#
# It exits 1 on an arrow back up out of kernels/ or comm/, on a breach of
# the public API, and on more circles than --max-circles.  gst/'s arrows are reported but only fail
# with --strict-gst (they were allowed while the elements still included
# kernels/error.h, lingbot/backend.h and lingbot/image.h; the meson test
# passes --strict-gst since they include lingbot/lingbot.h alone).
#
# Python 3 standard library only; run from anywhere:
#   tools/check-layers.py [--root DIR] [--strict-gst] [--max-circles N]

import argparse
import os
import re
import sys

LAYERS = {"kernels": 0, "comm": 1, "lingbot": 2, "gst-libs": 3, "gst": 4}
SOURCE_EXT = (".c", ".cc", ".cu")
HEADER_EXT = (".h", ".cuh")
GST_ALLOWED = {"lingbot/lingbot.h"}
# liblingbot's public (installed) headers; lingbot/lingbot.h includes only
# GLib, GIO and these
PUBLIC_HEADERS = {"lingbot/lingbot.h", "lingbot/control.h"}
PUBLIC_SYSTEM = {"glib.h", "gio/gio.h"}
STD_C = {"stdint.h", "stddef.h", "stdbool.h"}
ANGLE_RE = re.compile(r'^\s*#\s*include\s+<([^>]+)>', re.M)
ENGINE_RE = re.compile(r"\b(?:Lb[A-Z]\w*|lb_\w+|LB_\w+)")
# a function a public header declares ("name (" outside comments)
DECL_RE = re.compile(r"\b(lingbot_\w+) \(")
# a gtk-doc comment and the symbol it documents ("/**\n * name:")
DOC_RE = re.compile(r"^/\*\*\n \* ([A-Za-z_]\w*):.*?\*/", re.M | re.S)

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# GNU style: the name of a defined function starts its line, the return
# type is on the line before
DEF_RE = re.compile(r"^([A-Za-z_]\w*) \(", re.M)
IDENT_RE = re.compile(r"[A-Za-z_]\w*")
STRIP_RE = re.compile(
    r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def layer_of(path):
    return LAYERS.get(path.split("/", 1)[0])


def strip(text):
    """Comments, strings and characters removed; line breaks kept."""
    return STRIP_RE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def scan(root):
    files = {}
    for top in LAYERS:
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in sorted(names):
                if n.endswith(SOURCE_EXT + HEADER_EXT):
                    p = os.path.relpath(os.path.join(d, n), root)
                    with open(os.path.join(root, p), encoding="utf-8",
                              errors="replace") as f:
                        files[p.replace(os.sep, "/")] = f.read()
    return files


def resolve(files, path, inc):
    if inc in files:
        return inc
    # "gst/lingbot/x.h" is gst-libs/gst/lingbot/x.h (its include folder)
    if "gst-libs/" + inc in files:
        return "gst-libs/" + inc
    local = os.path.normpath(os.path.join(os.path.dirname(path), inc))
    return local if local in files else None


def definitions(path, code):
    """Non-static functions a source file defines."""
    lines = code.split("\n")
    out = set()
    for m in DEF_RE.finditer(code):
        n = code.count("\n", 0, m.start())
        before = lines[n - 1] if n > 0 else ""
        if "static" in before or "__global__" in before or \
                before.strip().startswith("#") or before.strip() == "":
            continue
        if not m.group(1).isupper():       # a macro such as G_STATIC_ASSERT
            out.add(m.group(1))
    return out


def build(files):
    """Returns {file: {target: (kind, line, what)}}."""
    code = {p: strip(t) for p, t in files.items()}
    defined = {}
    for p, c in code.items():
        if p.endswith(SOURCE_EXT):
            for name in definitions(p, c):
                defined.setdefault(name, set()).add(p)
    owner = {n: next(iter(ps)) for n, ps in defined.items()
             if len(ps) == 1 and n != "main"}
    edges = {p: {} for p in files}
    for p, text in files.items():
        for m in INCLUDE_RE.finditer(text):
            t = resolve(files, p, m.group(1))
            if t and t != p:
                line = text.count("\n", 0, m.start()) + 1
                edges[p].setdefault(t, ("include", line, m.group(1)))
        if not p.endswith(SOURCE_EXT):
            continue
        c = code[p]
        for m in IDENT_RE.finditer(c):
            t = owner.get(m.group(0))
            if t and t != p and t not in edges[p]:
                line = c.count("\n", 0, m.start()) + 1
                edges[p][t] = ("call", line, m.group(0))
    return edges


def arrows_up(edges):
    out = []
    for p, targets in sorted(edges.items()):
        lp = layer_of(p)
        for t, (kind, line, what) in sorted(targets.items()):
            lt = layer_of(t)
            if lt > lp:
                out.append((p, line, kind, what, t))
            elif lp >= LAYERS["gst-libs"] and lt < LAYERS["gst-libs"] and \
                    kind == "include" and t not in GST_ALLOWED:
                out.append((p, line, kind, what, t))
    return out


def circles(edges):
    """Strongly connected components of two files or more (Tarjan)."""
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        # iterative, so that long chains do not hit the recursion limit
        work = [(v, iter(sorted(edges[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(comps)


def public_breaches(files):
    """(file, line, what) for every breach of the public API."""
    out = []
    for h in sorted(PUBLIC_HEADERS):
        text = files.get(h, "")
        allowed = PUBLIC_SYSTEM if h == "lingbot/lingbot.h" else \
            PUBLIC_SYSTEM | STD_C
        for m in ANGLE_RE.finditer(text):
            if m.group(1) not in allowed:
                out.append((h, text.count("\n", 0, m.start()) + 1,
                            "includes <%s>" % m.group(1)))
        for m in INCLUDE_RE.finditer(text):
            if m.group(1) not in PUBLIC_HEADERS:
                out.append((h, text.count("\n", 0, m.start()) + 1,
                            'includes "%s" (not a public header)' %
                            m.group(1)))
    # functions liblingbot defines (kernels/, comm/, lingbot/)
    engine_defs = {}
    for p, text in files.items():
        if layer_of(p) < LAYERS["gst-libs"] and p.endswith(SOURCE_EXT):
            for name in definitions(p, strip(text)):
                engine_defs.setdefault(name, p)
    public_names = set()
    for h in PUBLIC_HEADERS:
        public_names |= set(IDENT_RE.findall(strip(files.get(h, ""))))
    # every function a public header declares has a gtk-doc block
    # ("/**\n * name:" on lines of their own, what gtk-doc and gi-docgen
    # read; not a one-line "/** name: ... */"), in the header or a source
    documented = set()
    for p, text in files.items():
        if layer_of(p) < LAYERS["gst-libs"]:
            documented |= set(m.group(1) for m in DOC_RE.finditer(text))
    for h in sorted(PUBLIC_HEADERS):
        code = strip(files.get(h, ""))
        seen = set()
        for m in DECL_RE.finditer(code):
            name = m.group(1)
            if name in documented or name in seen:
                continue
            seen.add(name)
            out.append((h, code.count("\n", 0, m.start()) + 1,
                        "%s has no gtk-doc block" % name))
    # the gtk-doc of a public function speaks the public API: its error
    # codes are LINGBOT_ERROR_*, not the engine's LB_ERROR_* of the same
    # values, which an application has no header for
    for p, text in sorted(files.items()):
        if layer_of(p) >= LAYERS["gst-libs"] or not p.endswith(SOURCE_EXT):
            continue
        for m in DOC_RE.finditer(text):
            if m.group(1) not in public_names:
                continue
            for e in ENGINE_RE.finditer(m.group(0)):
                out.append((p, text.count("\n", 0, m.start() + e.start()) + 1,
                            "the documentation of %s names engine "
                            "identifier %s" % (m.group(1), e.group(0))))
    for p, text in sorted(files.items()):
        if layer_of(p) < LAYERS["gst-libs"]:
            continue
        code = strip(text)
        for m in ENGINE_RE.finditer(code):
            out.append((p, code.count("\n", 0, m.start()) + 1,
                        "engine identifier %s" % m.group(0)))
        if not p.endswith(SOURCE_EXT):
            continue
        seen = set()
        for m in IDENT_RE.finditer(code):
            name = m.group(0)
            t = engine_defs.get(name)
            if t and name not in public_names and name not in seen:
                seen.add(name)
                out.append((p, code.count("\n", 0, m.start()) + 1,
                            "calls %s (%s), not in a public header" %
                            (name, t)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--strict-gst", action="store_true",
                    help="fail on gst/'s arrows too")
    ap.add_argument("--max-circles", type=int, default=-1,
                    help="fail when there are more circles (-1: never)")
    args = ap.parse_args()

    files = scan(os.path.abspath(args.root))
    edges = build(files)
    fail = False

    ups = arrows_up(edges)
    print("arrows back up: %d" % len(ups))
    for p, line, kind, what, t in ups:
        strict = layer_of(p) < LAYERS["gst"] or args.strict_gst
        fail |= strict
        print("  %s:%d: %s %s -> %s%s" % (p, line, kind, what, t,
              "" if strict else " (gst/, not yet enforced)"))

    breaches = public_breaches(files)
    print("public API breaches: %d" % len(breaches))
    for p, line, what in breaches:
        print("  %s:%d: %s" % (p, line, what))
    fail |= bool(breaches)

    comps = circles(edges)
    print("circles: %d" % len(comps))
    for comp in comps:
        print("  " + " <-> ".join(comp))
        members = set(comp)
        for p in comp:
            for t, (kind, line, what) in sorted(edges[p].items()):
                if t in members:
                    print("      %s:%d: %s %s -> %s" % (p, line, kind, what,
                                                       t))
    if 0 <= args.max_circles < len(comps):
        print("more than %d circles" % args.max_circles)
        fail = True
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
