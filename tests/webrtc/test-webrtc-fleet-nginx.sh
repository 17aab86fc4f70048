#!/usr/bin/env bash
# A fleet behind nginx: examples/webrtc/nginx/lingbot-fleet.conf (only its
# ports changed, and max_conns=2 -> 1: one group per process here) in
# front of two lingbot-webrtc-server processes on loopback (--server-id a
# and b, --device-groups cpu:1, a stand-in source), three clients
# (webrtc-test-client, the page's part):
#   1. the first gets frames, reloads (its resume token), and resumes on
#      the same process and session;
#   2. the second is placed on the other process (max_conns, least_conn);
#   3. the third finds both full: the backup process answers "busy" with
#      its exact message (exit 3 of the client);
# and the processes' /status through nginx say one session each, none
# free.
# Exits 77 when nginx is not installed.
#   test-webrtc-fleet-nginx.sh LINGBOT-WEBRTC-SERVER WEBRTC-TEST-CLIENT
set -uo pipefail
server=$1 client=$2
src=${LINGBOT_SOURCE_ROOT:?}
www=${LINGBOT_WEBRTC_WWW:?}
conf=$src/examples/webrtc/nginx/lingbot-fleet.conf

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
nginx=$(PATH=$PATH:/usr/sbin:/sbin command -v nginx) ||
  skip "nginx is not installed (Debian package nginx)"

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

start_server() {   # ID: its port (any free one, from its log) on stdout
  "$server" --source "videotestsrc is-live=true ! \
video/x-raw,width=64,height=64,framerate=10/1" --address 127.0.0.1 \
    --port 0 --www "$www" --server-id "$1" --device-groups cpu:1 \
    --resume-timeout 10 >"$tmp/server-$1.log" 2>&1 &
  pids+=("$!")
}
server_port() {   # ID
  for _ in $(seq 100); do
    p=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\)/.*|\1|p' \
      "$tmp/server-$1.log")
    [ -n "$p" ] && { echo "$p"; return 0; }
    sleep 0.1
  done
  cat "$tmp/server-$1.log" >&2
  return 1
}
start_server a
start_server b
pa=$(server_port a) && pb=$(server_port b) || fail "the servers did not start"

mkdir -p "$tmp/nginx/logs"
# the front door's port: a free one now (tried again if taken meanwhile)
for _ in 1 2 3 4 5; do
front=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s/127\.0\.0\.1:8081/127.0.0.1:$pa/g" \
  -e "s/127\.0\.0\.1:8082/127.0.0.1:$pb/g" \
  -e "s/listen 8080;/listen 127.0.0.1:$front;/" \
  -e "s/max_conns=2/max_conns=1/" "$conf" >"$tmp/nginx/lingbot-fleet.conf"
cat >"$tmp/nginx/nginx.conf" <<EOF
worker_processes 2;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log info;
events { worker_connections 256; }
http {
    access_log $tmp/nginx/logs/access.log;
    client_body_temp_path $tmp/nginx/body;
    proxy_temp_path $tmp/nginx/proxy;
    fastcgi_temp_path $tmp/nginx/fastcgi;
    uwsgi_temp_path $tmp/nginx/uwsgi;
    scgi_temp_path $tmp/nginx/scgi;
    include $tmp/nginx/lingbot-fleet.conf;
}
EOF
"$nginx" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -t >"$tmp/nginx-t.log" 2>&1 ||
  { cat "$tmp/nginx-t.log"; fail "nginx -t refused the configuration"; }
"$nginx" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -g 'daemon off;' \
  >"$tmp/nginx.log" 2>&1 &
nginx_pid=$!
sleep 0.3
kill -0 "$nginx_pid" 2>/dev/null && break
grep -q "Address already in use" "$tmp/nginx.log" "$tmp/nginx/logs/error.log" ||
  { cat "$tmp/nginx.log"; fail "nginx did not start"; }
done
pids+=("$nginx_pid")

up() {   # URL: answered within 10 s
  for _ in $(seq 100); do
    python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" \
      "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
up "http://127.0.0.1:$pa/status" && up "http://127.0.0.1:$pb/status" ||
  { cat "$tmp"/server-*.log; fail "the servers did not start"; }
up "http://127.0.0.1:$front/" ||
  { cat "$tmp/nginx.log" "$tmp/nginx/logs/error.log"; fail "nginx did not start"; }

url="ws://127.0.0.1:$front/ws"
wait_line() {   # FILE PATTERN COUNT: COUNT lines matching within 30 s
  for _ in $(seq 300); do
    [ "$(grep -c -e "$2" "$1" 2>/dev/null)" -ge "$3" ] && return 0
    sleep 0.1
  done
  cat "$1"
  return 1
}

# 1. frames, a reload, the same process and session
"$client" --frames 10 --timeout 40 --reload --hold 30 "$url" >"$tmp/c1.log" 2>&1 &
c1=$!
pids+=("$c1")
wait_line "$tmp/c1.log" '^pair ' 2 || fail "client 1: no frames after its reload"
first=$(grep '^welcome ' "$tmp/c1.log" | sed -n 1p)
second=$(grep '^welcome ' "$tmp/c1.log" | sed -n 2p)
id1=${first##*server=}
[ "$id1" = a ] || [ "$id1" = b ] || fail "client 1: welcome from '$id1'"
[ "$first" = "welcome session=1 peer=1 resumed=0 server=$id1" ] ||
  fail "client 1: first welcome '$first'"
[ "$second" = "welcome session=1 peer=2 resumed=1 server=$id1" ] ||
  fail "client 1: the reload did not resume on process $id1: '$second'"
echo "ok: client 1 on process $id1, reloaded: $second"

# 2. the other process
"$client" --frames 10 --timeout 40 --hold 30 "$url" >"$tmp/c2.log" 2>&1 &
pids+=("$!")
wait_line "$tmp/c2.log" '^pair ' 1 || fail "client 2: no frames"
id2=$(sed -n 's/^welcome .*server=//p' "$tmp/c2.log")
[ -n "$id2" ] && [ "$id2" != "$id1" ] ||
  fail "client 2 on process '$id2', client 1 on '$id1' (not balanced)"
echo "ok: client 2 on process $id2"

# 3. both full: busy, said clearly
rc=0
"$client" --frames 10 --timeout 20 "$url" >"$tmp/c3.log" 2>&1 || rc=$?
cat "$tmp/c3.log"
[ $rc -eq 3 ] || fail "client 3: exit $rc (not 3, busy)"
grep -qxF "busy: the server is busy: 1 of 1 sessions in use, try again later" \
  "$tmp/c3.log" || fail "client 3: not the busy line"
echo "ok: client 3 refused: $(cat "$tmp/c3.log")"

# the capacity, per process, through the front door
for id in a b; do
  st=$(python3 -c "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1]).read().decode())" \
    "http://127.0.0.1:$front/status/$id")
  echo "$st" | grep -q "^{\"server\":\"$id\",\"max-sessions\":1,\"free\":0,\"retry-after\":null," ||
    fail "/status/$id: $st"
done
echo "ok: /status of a and b: no free slot"
grep -q "peer 2 resumes it" "$tmp/server-$id1.log" ||
  { cat "$tmp/server-$id1.log"; fail "process $id1 did not log the resume"; }
