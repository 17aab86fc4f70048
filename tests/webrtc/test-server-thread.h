/* lingbot-gst: a lingbot-webrtc-server in a thread of the test process
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The server (webrtc-server.c, compiled into the test) runs on a
 * GMainContext of its own in a thread, on 127.0.0.1 and any free port, with
 * a stand-in source (videotestsrc) instead of the model: the test thread
 * is its clients.  Shared by test-webrtc-hardening.c and
 * test-webrtc-fleet.c.
 */
#ifndef LINGBOT_TEST_SERVER_THREAD_H
#define LINGBOT_TEST_SERVER_THREAD_H

#include <glib.h>

#include "webrtc-server.h"

G_BEGIN_DECLS

/* the stand-in session source: no model */
#define TEST_SERVER_STAND_IN "videotestsrc is-live=true pattern=black ! " \
  "video/x-raw,width=64,height=64,framerate=10/1"

typedef struct
{
  LingbotWebrtcConfig cfg;      /* set between _config() and _start() */
  GThread *thread;
  GMainContext *context;
  GMainLoop *loop;
  LingbotWebrtcServer *server;  /* valid from _start() to _stop() */
  guint port;
  GMutex lock;
  GCond cond;
  gboolean ready;
  char *error;
} TestServer;

/* zeroes @ts and sets the tests' defaults: port 0 (any), the page from
 * LINGBOT_WEBRTC_WWW, the stand-in source, 4 sessions, a 1 s resume */
void test_server_config (TestServer * ts);

/* starts the server thread and waits until the server listens (or
 * aborts the test with the server's error) */
void test_server_start (TestServer * ts);

/* quits the server's loop from inside it, joins the thread (the server is
 * freed there) and frees the rest */
void test_server_stop (TestServer * ts);

G_END_DECLS

#endif
