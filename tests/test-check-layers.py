#!/usr/bin/python3
# lingbot-gst: tools/check-layers.py finds each breach of the public API
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Writes a small tree (kernels/, lingbot/, gst/) whose public API is clean,
# checks that check-layers.py passes it, then adds one breach at a time and
# checks that it fails naming it: lingbot.h including an engine header or
# a system header other than GLib/GIO, a public header including a private
# one, a public function without a gtk-doc block (or with a one-line
# one), an engine identifier in the gtk-doc of a public function, one in
# gst/ or gst-libs/, a call from gst/ to a liblingbot function no public
# header declares.
#
#   tests/test-check-layers.py TOOLS/check-layers.py

import os
import subprocess
import sys
import tempfile

CLEAN = {
    "kernels/tensor.h": "#pragma once\ntypedef struct _LbTensor LbTensor;\n",
    "kernels/tensor.c": '#include "kernels/tensor.h"\n\nvoid\n'
                        "lb_tensor_free (LbTensor * t)\n{\n}\n",
    "lingbot/control.h": "#pragma once\n#include <glib.h>\n#include <stdint.h>\n",
    "lingbot/lingbot.h": '#pragma once\n#include <glib.h>\n'
                         '#include <gio/gio.h>\n#include "lingbot/control.h"\n'
                         "void lingbot_world_unref (void *w);\n",
    "lingbot/vae.h": '#pragma once\n#include "kernels/tensor.h"\n',
    "lingbot/world.c": '#include "lingbot/lingbot.h"\n#include "lingbot/vae.h"\n'
                       "\n/**\n * lingbot_world_unref:\n * @w: a world\n */\n"
                       "void\nlingbot_world_unref (void *w)\n{\n}\n\n"
                       "void\nlingbot_vae_secret (void)\n{\n}\n",
    "gst/gstx.c": '#include "lingbot/lingbot.h"\n\nstatic void\n'
                  "f (void *w)\n{\n  lingbot_world_unref (w);\n}\n",
}

BREACHES = [
    ("lingbot/lingbot.h", '#include "kernels/tensor.h"\n',
     'lingbot/lingbot.h:6: includes "kernels/tensor.h" (not a public header)'),
    ("lingbot/lingbot.h", "#include <stdint.h>\n",
     "lingbot/lingbot.h:6: includes <stdint.h>"),
    ("lingbot/control.h", '#include "lingbot/vae.h"\n',
     'lingbot/control.h:4: includes "lingbot/vae.h" (not a public header)'),
    ("gst/gstx.c", "static LbTensor *t;\n",
     "gst/gstx.c:8: engine identifier LbTensor"),
    ("lingbot/world.c", "\n/**\n * lingbot_world_unref:\n * @error: "
     "%LB_ERROR_IO\n */\n",
     "lingbot/world.c:20: the documentation of lingbot_world_unref names "
     "engine identifier LB_ERROR_IO"),
    ("lingbot/lingbot.h", "void lingbot_world_ref (void *w);\n",
     "lingbot/lingbot.h:6: lingbot_world_ref has no gtk-doc block"),
    ("lingbot/lingbot.h", "/** lingbot_world_ref: @w: a world */\n"
     "void lingbot_world_ref (void *w);\n",
     "lingbot/lingbot.h:7: lingbot_world_ref has no gtk-doc block"),
    ("gst/gstx.c", "static void\ng (void)\n{\n  lingbot_vae_secret ();\n}\n",
     "gst/gstx.c:11: calls lingbot_vae_secret (lingbot/world.c), not in a "
     "public header"),
]


def run(tool, root):
    p = subprocess.run([sys.executable, tool, "--root", root, "--strict-gst"],
                       stdout=subprocess.PIPE, universal_newlines=True)
    return p.returncode, p.stdout


def write(root, files):
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)


def main():
    tool = sys.argv[1]
    fail = 0
    with tempfile.TemporaryDirectory() as root:
        write(root, CLEAN)
        rc, out = run(tool, root)
        if rc != 0 or "public API breaches: 0" not in out:
            print("FAIL: the clean tree fails:\n" + out)
            fail = 1
        else:
            print("ok: the clean tree passes")
        for path, extra, want in BREACHES:
            write(root, CLEAN)
            write(root, {path: CLEAN[path] + extra})
            rc, out = run(tool, root)
            if rc != 1 or ("  " + want + "\n") not in out:
                print("FAIL: %s + %r: rc %d, want %r in:\n%s" %
                      (path, extra, rc, want, out))
                fail = 1
            else:
                print("ok: " + want)
    return fail


if __name__ == "__main__":
    sys.exit(main())
