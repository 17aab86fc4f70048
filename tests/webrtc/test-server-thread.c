/* lingbot-gst: a lingbot-webrtc-server in a thread of the test process
 * SPDX-License-Identifier: LGPL-2.1-or-later
 * See test-server-thread.h.
 */
#include "test-server-thread.h"

#include <string.h>

static gpointer
server_thread (gpointer data)
{
  TestServer *ts = data;
  g_autoptr (GError) err = NULL;
  LingbotWebrtcServer *server;

  g_main_context_push_thread_default (ts->context);
  server = lingbot_webrtc_server_new (&ts->cfg, &err);
  g_mutex_lock (&ts->lock);
  ts->server = server;
  ts->port = server ? lingbot_webrtc_server_get_port (server) : 0;
  ts->error = err ? g_strdup (err->message) : NULL;
  ts->ready = TRUE;
  g_cond_signal (&ts->cond);
  g_mutex_unlock (&ts->lock);
  if (server)
    g_main_loop_run (ts->loop);
  lingbot_webrtc_server_free (server);
  g_main_context_pop_thread_default (ts->context);
  return NULL;
}

void
test_server_config (TestServer * ts)
{
  memset (ts, 0, sizeof *ts);
  lingbot_webrtc_config_init (&ts->cfg);
  ts->cfg.port = 0;
  ts->cfg.www_dir = g_getenv ("LINGBOT_WEBRTC_WWW");
  ts->cfg.source = TEST_SERVER_STAND_IN;
  ts->cfg.max_sessions = 4;
  ts->cfg.resume_timeout = 1;
}

void
test_server_start (TestServer * ts)
{
  g_mutex_init (&ts->lock);
  g_cond_init (&ts->cond);
  ts->context = g_main_context_new ();
  ts->loop = g_main_loop_new (ts->context, FALSE);
  ts->thread = g_thread_new ("server", server_thread, ts);
  g_mutex_lock (&ts->lock);
  while (!ts->ready)
    g_cond_wait (&ts->cond, &ts->lock);
  g_mutex_unlock (&ts->lock);
  if (ts->server == NULL)
    g_error ("server: %s", ts->error);
}

static gboolean
quit_loop (gpointer loop)
{
  g_main_loop_quit (loop);
  return G_SOURCE_REMOVE;
}

void
test_server_stop (TestServer * ts)
{
  /* from inside the loop: a quit before g_main_loop_run() started would
   * be lost, and the join would wait for ever */
  GSource *quit = g_idle_source_new ();

  g_source_set_callback (quit, quit_loop, ts->loop, NULL);
  g_source_attach (quit, ts->context);
  g_source_unref (quit);
  g_thread_join (ts->thread);
  g_main_loop_unref (ts->loop);
  g_main_context_unref (ts->context);
  g_mutex_clear (&ts->lock);
  g_cond_clear (&ts->cond);
  g_free (ts->error);
}
