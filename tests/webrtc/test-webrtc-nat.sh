#!/usr/bin/env bash
# suite webrtc (test webrtc-nat): a session that plays only through a TURN relay.
#
# Four network namespaces joined by a router namespace:
#   client  10.77.1.2  behind a NAT: the router masquerades what it sends
#   server  10.77.2.2  lingbot-webrtc-server (a stand-in source, no model)
#   turn    10.77.3.2  coturn (turnserver), long-term credentials
# The router forwards the client's TCP to the server's port (signalling)
# and everything between the client or the server and the relay, and drops
# all other traffic between client and server: no host or server-reflexive
# candidate pair can work, only a relayed one.  The client is the project's
# webrtcbin client (webrtc-test-client), which takes the ICE servers from
# `welcome` as the page does.
#   1. coturn running: frames arrive and the selected candidate pair has a
#      relay candidate (the client's, or the server's reached from the
#      client's server-reflexive address);
#   2. coturn stopped: the server releases the peer with its clear message
#      (the TURN relay to check), which the client prints.
# The page itself, in headless Chromium in the client's namespace
# (tests/webrtc/browser-check.mjs, scenarios relay and relay-absent), does
# both as well: frames through the relay (a relay candidate in the
# selected pair), and without it the server's message on the page.
# That part needs node, /usr/bin/chromium and playwright-core in
# PLAYWRIGHT-DIR (suite browser installs it there); without them it is
# left out with a note.
# Exits 77 (with the reason) when namespaces cannot be made here (not
# root, a kernel or sandbox that forbids them) or turnserver, ip or
# iptables is missing.
#   test-webrtc-nat.sh LINGBOT-WEBRTC-SERVER WEBRTC-TEST-CLIENT [PLAYWRIGHT-DIR]
set -uo pipefail
server=$1 client=$2 pw=${3:-}
www=${LINGBOT_WEBRTC_WWW:?}
src=${LINGBOT_SOURCE_ROOT:?}

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

for tool in ip iptables turnserver; do
  command -v "$tool" >/dev/null ||
    PATH=$PATH:/usr/sbin:/sbin command -v "$tool" >/dev/null ||
    skip "$tool is not installed (tools/deps.sh: iproute2, iptables, coturn)"
done
export PATH=$PATH:/usr/sbin:/sbin
[ "$(id -u)" -eq 0 ] || skip "not root: network namespaces need CAP_NET_ADMIN"

tag=lb$$
ns_c=$tag-cli ns_s=$tag-srv ns_t=$tag-turn ns_r=$tag-rtr
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  for n in $ns_c $ns_s $ns_t $ns_r; do ip netns del "$n" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

ip netns add "$ns_r" 2>"$tmp/err" ||
  skip "cannot make a network namespace: $(cat "$tmp/err")"
ip netns add "$ns_c" && ip netns add "$ns_s" && ip netns add "$ns_t" ||
  fail "ip netns add"
in_r() { ip netns exec "$ns_r" "$@"; }
# link NS NET: NS's eth0 = 10.77.NET.2, the router's r$NET = 10.77.NET.1
link() {
  ip link add "$tag-r$2" type veth peer name "$tag-x$2" || return 1
  ip link set "$tag-r$2" netns "$ns_r" && ip link set "$tag-x$2" netns "$1" &&
    in_r ip link set "$tag-r$2" name "r$2" &&
    in_r ip addr add "10.77.$2.1/24" dev "r$2" && in_r ip link set "r$2" up &&
    ip -n "$1" link set "$tag-x$2" name eth0 &&
    ip -n "$1" addr add "10.77.$2.2/24" dev eth0 &&
    ip -n "$1" link set eth0 up && ip -n "$1" link set lo up &&
    ip -n "$1" route add default via "10.77.$2.1"
}
link "$ns_c" 1 2>"$tmp/err" || skip "cannot link namespaces (veth): $(cat "$tmp/err")"
link "$ns_s" 2 && link "$ns_t" 3 || fail "veth links"
in_r ip link set lo up
in_r sysctl -qw net.ipv4.ip_forward=1 || fail "ip_forward in the router"

port=8443
# the router: the client's network is masqueraded, client <-> server only
# for the signalling TCP port, the relay reachable from both
in_r iptables -P FORWARD DROP 2>"$tmp/err" ||
  skip "iptables refused in a namespace: $(cat "$tmp/err")"
in_r iptables -A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT &&
  in_r iptables -A FORWARD -i r1 -o r2 -p tcp --dport $port -j ACCEPT &&
  in_r iptables -A FORWARD -i r1 -o r3 -j ACCEPT &&
  in_r iptables -A FORWARD -i r2 -o r3 -j ACCEPT &&
  in_r iptables -A FORWARD -i r3 -o r2 -j ACCEPT &&
  in_r iptables -t nat -A POSTROUTING -s 10.77.1.0/24 -j MASQUERADE ||
  skip "iptables (conntrack, MASQUERADE) refused in a namespace"

printf 'alice:s3cret\n' >"$tmp/credentials"
start_turn() {
  ip netns exec "$ns_t" turnserver -n --listening-ip=10.77.3.2 \
    --relay-ip=10.77.3.2 --listening-port=3478 --min-port=49152 \
    --max-port=49400 --lt-cred-mech --user=alice:s3cret --realm=lingbot \
    --fingerprint --no-tls --no-dtls --no-cli --no-stdout-log \
    --log-file="$tmp/turn.log" --simple-log --pidfile="$tmp/turn.pid" \
    --allow-loopback-peers >/dev/null 2>&1 &
  turn_pid=$!
  pids+=("$turn_pid")
  for _ in $(seq 50); do
    ip netns exec "$ns_t" ss -lun 2>/dev/null | grep -q '10.77.3.2:3478' && return 0
    sleep 0.1
  done
  cat "$tmp/turn.log"* 2>/dev/null
  fail "turnserver did not listen on 10.77.3.2:3478"
}

ip netns exec "$ns_s" "$server" --source "videotestsrc is-live=true ! \
video/x-raw,width=64,height=64,framerate=10/1" --address 10.77.2.2 \
  --port $port --www "$www" --peer-timeout 5 --resume-timeout 1 \
  --turn "turn:10.77.3.2:3478?transport=udp" \
  --turn-credentials "$tmp/credentials" >"$tmp/server.log" 2>&1 &
pids+=("$!")
for _ in $(seq 100); do
  grep -q "listening on" "$tmp/server.log" && break
  sleep 0.1
done
grep -q "listening on" "$tmp/server.log" ||
  { cat "$tmp/server.log"; fail "the server did not start"; }
grep -qF "ICE: STUN none, TURN turn:10.77.3.2:3478?transport=udp (user alice), transport policy all" \
  "$tmp/server.log" || { cat "$tmp/server.log"; fail "no ICE line"; }

page=1
if [ -z "$pw" ] || [ ! -d "$pw/node_modules/playwright-core" ] ||
  ! command -v node >/dev/null || [ ! -x /usr/bin/chromium ]; then
  echo "note: the page's part is left out (needs node, /usr/bin/chromium and playwright-core in '$pw': suite browser installs it)"
  page=0
fi
page_check() {   # SCENARIO [BROWSER-CHECK OPTION...]
  [ $page = 1 ] || return 0
  ip netns exec "$ns_c" env NODE_PATH="$pw/node_modules" HOME="$tmp" \
    timeout 120 node "$src/tests/webrtc/browser-check.mjs" \
    "http://10.77.2.2:$port/" --chromium /usr/bin/chromium --out "$tmp/page" \
    --no-loopback-flag --timeout-ms 40000 --scenario "$@"
}

# no UDP between client and server: what a host candidate would need
if ip netns exec "$ns_c" timeout 2 bash -c \
  'echo x >/dev/udp/10.77.2.2/9; exec 3<>/dev/tcp/10.77.2.2/9' 2>/dev/null; then
  fail "the client reaches the server's port 9"
fi

# 1. through the relay
start_turn
ip netns exec "$ns_c" "$client" --frames 10 --timeout 30 --expect-relay \
  "ws://10.77.2.2:$port/ws" >"$tmp/client1.log" 2>&1
rc=$?
cat "$tmp/client1.log"
[ $rc -eq 0 ] || { cat "$tmp/server.log"; fail "no session through the relay (exit $rc)"; }
grep -qE '^pair (local=relay |.* remote=relay$)' "$tmp/client1.log" ||
  fail "the pair is not relayed"
grep -q '^frames ' "$tmp/client1.log" || fail "no frames"
echo "ok: frames through the TURN relay: $(grep '^pair' "$tmp/client1.log")"
sleep 1.5   # the session's resume timeout: the slot free again
page_check relay || { cat "$tmp/server.log"; fail "the page did not play through the relay"; }

# 2. the relay gone: a clear message
kill "$turn_pid"
wait "$turn_pid" 2>/dev/null
sleep 1.5   # the first session's resume timeout
ip netns exec "$ns_c" "$client" --frames 10 --timeout 30 \
  "ws://10.77.2.2:$port/ws" >"$tmp/client2.log" 2>&1
rc=$?
cat "$tmp/client2.log"
[ $rc -eq 1 ] || fail "exit $rc without the relay (not 1)"
want="error timeout: the browser did not connect within 5 s (no direct path and none through the TURN relay turn:10.77.3.2:3478?transport=udp: is it running, reachable from both ends, and are the credentials right?)"
grep -qxF "$want" "$tmp/client2.log" ||
  { cat "$tmp/server.log"; fail "no line '$want'"; }
echo "ok: without the relay: $want"
sleep 1.5
# the page: the server's reason, as its status line shows it on the retry
page_check relay-absent --expect-status "${want#error timeout: }" ||
  { cat "$tmp/server.log"; fail "the page did not say why"; }
