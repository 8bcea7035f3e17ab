#!/usr/bin/env bash
# attack-table.sh BINARY: the attacks of issue 13's campaign, run against a
# daemon started from BINARY on the DEFAULT config (only state_dir and the
# socket are set, outside /tmp, since every sandbox has a private /tmp that
# would hide them for free), as an agent would: shell commands of principal
# alice through POST /v1/call, plus a few hostile HTTP requests.
#
# It prints one tab-separated line per attack: name, "HARM" or "no harm",
# and the evidence. Run it for an old build and a new one to get the
# attack | before | after table (issue 13's closing note):
#
#   git worktree add --detach /var/tmp/old f660dca   # main before issue 13
#   (cd /var/tmp/old && go build -o /var/tmp/old.bin ./cmd/capsule-host)
#   go build -o /var/tmp/new.bin ./cmd/capsule-host
#   internal/attacktable/attack-table.sh /var/tmp/old.bin
#   internal/attacktable/attack-table.sh /var/tmp/new.bin
#
# Needs root (the campaign's setting), curl and jq. The fork bomb is
# bounded (2,000 sleeps) and everything it starts is killed at the end.
# It is a measurement for the note, not a test: the standing suite is
# TestAttackDefaultConfig (cmd/capsule-host/internal/daemon).
set -u
bin=$(realpath "$1")
base=$(mktemp -d /var/tmp/attack-table-XXXX)
chmod 755 "$base"
state=$base/state
sock=$base/run/capsule-host.sock
mkdir -p "$base/run" "$base/private" && chmod 700 "$base/run" "$base/private"
# The daemon's log and this script's scratch files stay in a 0700
# directory: the log names bob's command, secret included, and a
# world-readable copy would be a leak this script made, not the daemon.
priv=$base/private
printf 'state_dir = "%s"\nsocket = "%s"\n' "$state" "$sock" >"$base/config.toml"
cgroups() { find /sys/fs/cgroup -maxdepth 6 -type d -name '*capsule*' 2>/dev/null | sort; }
cgroups >"$base/groups.before"
"$bin" --config "$base/config.toml" serve >"$priv/daemon.log" 2>&1 &
dpid=$!
cleanup() {
	pkill -KILL -f '^sleep 61$' 2>/dev/null
	kill "$dpid" 2>/dev/null
	wait "$dpid" 2>/dev/null
	rm -rf "$base"
}
trap cleanup EXIT
# Ready means capsules compiled: a daemon that answers health while it
# loads (status "loading") refuses calls until then. Builds from before
# the loading server answer "ok" once they answer at all.
ready() { curl -s --max-time 2 --unix-socket "$sock" http://x/v1/health 2>/dev/null | grep -q '"status":"ok"'; }
for _ in $(seq 1 3000); do # 5 min: a cold compile on a loaded machine
	ready && break
	sleep 0.1
done
ready || {
	echo "daemon not ready after 5 min; health: $(curl -s --max-time 2 --unix-socket "$sock" http://x/v1/health)" >&2
	cat "$priv/daemon.log" >&2
	exit 1
}

row() { printf '%s\t%s\t%s\n' "$1" "$2" "$3"; }

# post BODY: the HTTP status and body of POST /v1/call.
post() {
	curl -s --max-time 150 --unix-socket "$sock" -o "$priv/out" -w '%{http_code}' \
		-X POST -H 'Content-Type: application/json' --data-binary "$1" http://x/v1/call
}

# sh PRINCIPAL COMMAND [YIELD_MS]: run_shell_command's output object.
sh_() {
	local body
	body=$(jq -nc --arg p "$1" --arg c "$2" --argjson y "${3:-20000}" \
		'{capsule:"shell",tool:"run_shell_command",principal:$p,input:{command:$c,yield_ms:$y}}')
	post "$body" >/dev/null
	jq -c '.output // .' "$priv/out"
}
code() { jq -r '(.exit.exit_code // .exit_code) as $c | (.exit.signal // .signal) as $s | if $c != null then $c elif $s != null then "signal \($s)" else "none: \(.)" end' <<<"$1"; }
out() { jq -r '(.stdout // "") + (.stderr // "")' <<<"$1"; }

secret=bob-s3cret-$(head -c6 /dev/urandom | od -An -tx1 | tr -d " \n")
sh_ bob "echo $secret > secret.txt" >/dev/null
bobfile=$(find "$state" -name secret.txt -path '*bob*' | head -1)
bobdir=$(dirname "$bobfile")
bobproc=$(sh_ bob "sleep 300" 100)
bobid=$(jq -r '.id // ""' <<<"$bobproc")

r1=$(sh_ alice "cat ../bob/secret.txt")
r2=$(sh_ alice "cat $bobfile")
if grep -q "$secret" <<<"$(out "$r1")$(out "$r2")"; then row "read another principal's files" HARM "read bob's secret.txt"; else row "read another principal's files" "no harm" "cat ../bob/secret.txt and its host path fail"; fi

sh_ alice "echo pwned > ../bob/pwned.txt; echo pwned > $bobdir/pwned.txt" >/dev/null
if [ -e "$bobdir/pwned.txt" ]; then row "write another principal's files" HARM "wrote bob's pwned.txt"; else row "write another principal's files" "no harm" "bob's workspace unchanged"; fi

total=0 readable=0
while IFS= read -r f; do
	total=$((total + 1))
	[ "$(code "$(sh_ alice "cat '$f' >/dev/null")")" = 0 ] && readable=$((readable + 1))
done < <(find "$state" \( -path "$state/workspaces" -o -path "$state/cache" \) -prune -o \( -type f -o -type s \) -print | head -40)
if [ "$readable" -gt 0 ]; then row "read the state directory (spill files, journal)" HARM "$readable of $total files read"; else row "read the state directory (spill files, journal)" "no harm" "0 of $total files read"; fi

r=$(sh_ alice "curl -s --max-time 5 --unix-socket $sock http://x/v1/processes")
if [ -n "$bobid" ] && grep -q "$bobid" <<<"$(out "$r")"; then row "daemon API through its socket" HARM "listed bob's 256-bit process ID"; elif grep -q '"processes"\|"id"' <<<"$(out "$r")"; then row "daemon API through its socket" HARM "listed processes"; else row "daemon API through its socket" "no harm" "socket not reachable from the sandbox (curl exit $(code "$r"))"; fi

r=$(sh_ alice "ls -A /root")
if [ "$(code "$r")" = 0 ]; then row "read /root" HARM "ls -A /root exit 0"; else row "read /root" "no harm" "exit $(code "$r")"; fi
r=$(sh_ alice "head -c 5 /etc/shadow")
if grep -q '^root:' <<<"$(out "$r")"; then row "read /etc/shadow" HARM "first bytes: root:"; else row "read /etc/shadow" "no harm" "exit $(code "$r")"; fi

# kill -0 asks whether a signal would be delivered, without sending one
# (the campaign sent SIGSTOP to pid 1).
r=$(sh_ alice "kill -0 1 && kill -0 $dpid")
if [ "$(code "$r")" = 0 ]; then row "signal host pid 1 and the daemon" HARM "kill -0 1 and kill -0 $dpid succeed"; else row "signal host pid 1 and the daemon" "no harm" "exit $(code "$r")"; fi

# The bomb runs on after its call; the peak is counted on the host.
sh_ alice 'i=0; while [ $i -lt 2000 ]; do sleep 61 & i=$((i+1)); done 2>/dev/null; wait' 100 >/dev/null
n=0
for _ in $(seq 1 300); do
	c=$(pgrep -c -f '^sleep 61$')
	[ "$c" -gt "$n" ] && n=$c
	[ "$c" -ge 2000 ] && break
	sleep 0.1
done
pkill -KILL -f '^sleep 61$' 2>/dev/null
if [ "$n" -gt 512 ]; then row "fork bomb (2,000 background sleeps)" HARM "$n processes on the host"; else row "fork bomb (2,000 background sleeps)" "no harm" "peak $n on the host (the default pids ceiling is 512 per process tree)"; fi

r=$(sh_ alice "dd if=/dev/zero of=/dev/null bs=1536M count=1")
if grep -q '^1+0 records in' <<<"$(out "$r")"; then row "memory hog (one 1.5 GiB buffer)" HARM "the whole buffer was filled"; else row "memory hog (one 1.5 GiB buffer)" "no harm" "$(out "$r" | head -1 | head -c 60) ($(code "$r"))"; fi

# Pool starvation: eve holds eight 22 s calls, then alice lists.
pids=()
for _ in 1 2 3 4 5 6 7 8; do
	(jq -nc '{capsule:"shell",tool:"run_shell_command",principal:"eve",input:{command:"sleep 22",yield_ms:20000}}' |
		curl -s --max-time 60 --unix-socket "$sock" -o /dev/null -X POST --data-binary @- http://x/v1/call) &
	pids+=($!)
done
sleep 1
t0=$(date +%s%N)
post '{"capsule":"shell","tool":"list_processes","principal":"alice","input":{}}' >/dev/null
ms=$((($(date +%s%N) - t0) / 1000000))
wait "${pids[@]}"
if [ "$ms" -gt 1000 ]; then row "pool starvation (eve: 8 calls of 22 s)" HARM "alice's list_processes took $ms ms"; else row "pool starvation (eve: 8 calls of 22 s)" "no harm" "alice's list_processes took $ms ms"; fi

st=$(post $'{"capsule":"shell","tool":"run_shell_command","principal":"alice","input":{"command":"echo \xff"}}')
if [ "$st" = 400 ]; then row "HTTP: invalid UTF-8 body" "no harm" "400"; else row "HTTP: invalid UTF-8 body" HARM "status $st"; fi
st=$(post '{"capsule":"shell","tool":"run_shell_command","principal":"alice","input":{"command":"true"}}{"x":1}')
if [ "$st" = 400 ]; then row "HTTP: trailing data after the JSON body" "no harm" "400"; else row "HTTP: trailing data after the JSON body" HARM "status $st (accepted)"; fi
st=$(post '{"capsule":"shell","tool":"run_shell_command","principal":"alice","input":{"command":"true","yield_ms":999999}}')
if [ "$st" = 400 ]; then row "tool input against its JSON Schema (yield_ms maximum 20000)" "no harm" "400 $(jq -r '.error.code // .code // ""' "$priv/out")"; else row "tool input against its JSON Schema (yield_ms maximum 20000)" HARM "status $st: the host passed it to the guest"; fi

# Clean shutdown: stop every process first (the default keeps them, by
# design), then look for what the daemon left behind.
for id in $(curl -s --max-time 10 --unix-socket "$sock" http://x/v1/processes | jq -r '.. | .id? // empty' | sort -u); do
	curl -s --max-time 30 --unix-socket "$sock" -X POST -o /dev/null "http://x/v1/processes/$id/stop"
done
kill -TERM "$dpid"
for _ in $(seq 1 600); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
wait "$dpid" 2>/dev/null
cgroups | comm -13 "$base/groups.before" - >"$base/groups.left"
groups=$(wc -l <"$base/groups.left")
spills=$(find "$state" -path '*spill*' -mindepth 1 2>/dev/null | wc -l)
if [ "$groups" -gt 0 ] || [ "$spills" -gt 0 ]; then row "left behind by a clean shutdown" HARM "$groups cgroups ($(tr '\n' ' ' <"$base/groups.left")), $spills spill entries"; else row "left behind by a clean shutdown" "no harm" "0 cgroups, 0 spill entries"; fi
