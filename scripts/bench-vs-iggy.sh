#!/usr/bin/env bash
# bench-vs-iggy.sh: run Apache Iggy's own, unmodified `iggy-bench` against Iggy's
# server and against `sluice server`, one server at a time, alternating
# (Iggy, sluice, Iggy, sluice, ...), each run on a fresh data directory, and print
# a markdown table of the medians (with the sluice / Iggy ratio), each server's CPU
# seconds and peak RSS, and the load average before and after.
#
# Nothing of Iggy's is in this repository, and neither is a recipe for building
# it: this script only runs binaries built elsewhere. It needs
#   - Iggy's server binary (iggy-server) and the config.toml it reads (Iggy's
#     core/server/config.toml, given to it as IGGY_CONFIG_PATH),
#   - Iggy's iggy-bench binary, unmodified,
#   - the sluice binary (cargo build --release -p sluice-cli).
# It was written against Apache Iggy commit cc269ef70ef2d78af5102f5560b5b03c9dd81401
# (server 0.9.0-edge.5, SDK 0.11.0-edge.4; that iggy-bench prints "SDK framing: vsr
# (Register handshake)"). Iggy's server reads IGGY_* environment variables over its
# config file (IGGY_SYSTEM_PATH, IGGY_TCP_ADDRESS, IGGY_HTTP_ADDRESS, ...); the
# script sets those, turns QUIC and WebSocket off, and sets root iggy/iggy.
#
# Usage:
#   scripts/bench-vs-iggy.sh [OPTIONS] [--] [SPEC...]
#
# A SPEC is the iggy-bench command line of one benchmark (global options such as
# -T may come first), as one word, e.g.
#     "balanced-producer --partitions 8 --producers 4 tcp"
#     "-T 100MB pinned-consumer --streams 4 --consumers 4 http"
# "PREP => MEASURED" runs PREP first on the same server, unmeasured (for the
# consumer benchmarks, which need data already in the streams):
#     "balanced-producer tcp => balanced-consumer-group tcp"
#     "pinned-producer --streams 4 tcp => pinned-consumer --streams 4 tcp"
# After the transport word (tcp, http, quic, websocket) the script adds
# --server-address with the address both servers listen on, unless the spec
# already names one. Without SPECs the four consumer-group benchmarks run with
# iggy-bench's default actors and partitions (see DEFAULT_SPECS below).
#
# Options (each has an environment variable too):
#   --iggy-server PATH   IGGY_SERVER   Iggy's server binary
#   --iggy-bench PATH    IGGY_BENCH    Iggy's iggy-bench binary
#   --sluice PATH        SLUICE        the sluice binary
#   --iggy-config PATH   IGGY_CONFIG   Iggy's config.toml (default: <tree>/core/server/
#                                      config.toml, <tree> being where the server binary
#                                      lives under target/release)
#   -n, --reps N         REPS          repetitions per server and spec (default 3)
#   --global ARGS        BENCH_GLOBAL  iggy-bench global options put before every spec
#                                      (default "-T 500MB -m 1000 -P 1000")
#   --servers LIST       SERVERS       which servers, in this order (default "iggy sluice")
#   --timeout SECS       BENCH_TIMEOUT limit for one iggy-bench run (default 300)
#   --tcp-addr ADDR      TCP_ADDR      TCP address of both servers (default 127.0.0.1:8090)
#   --http-addr ADDR     HTTP_ADDR     HTTP address of both servers (default 127.0.0.1:3000)
#   --out DIR            OUT_DIR       logs and raw results (default: a new /tmp directory)
#   --keep-data          KEEP_DATA=1   keep each run's data directory
#   --sluice-log FILTER  SLUICE_LOG    RUST_LOG for sluice (default info)
#   --warm-mib N         WARM_MIB      before each server start, write and delete an N MiB
#                                      file in /tmp (default 4096; 0: none), see below
#   --drop-caches        DROP_CACHES=1 before each warm-up, sync and drop the page cache
#                                      (needs root): a cache full of other work (a build,
#                                      a test run) made one-second runs here 2x slower and
#                                      unrepeatable
#   --sync-ref N         SYNC_REF      for each spec that asks for --enforce-fsync, after
#                                      each repetition's servers, measure the disk's
#                                      write + fdatasync throughput for the same bytes: N
#                                      writers (as many as the benchmark's producers), each
#                                      its own new file in /tmp, -m x -P bytes per write,
#                                      fdatasync after each, -T bytes in all (default 0: off;
#                                      needs python3)
#
# Why the warm-up: on a virtual machine the first write into guest memory that the
# host has not backed yet is slow (measured here: 1 GB of 1 MB pwrites into a fresh
# file took 2.6 CPU seconds the first time and 0.3 s each time after, the freed page
# cache being reused). A server writing into page cache that has never been touched
# pays that, and the other does not, whichever runs first. Writing and deleting a
# file of the run's size before each start gives both servers backed pages.
#
# Besides iggy-bench's "Total throughput" (the sum of each actor's own rate), the
# report gives each benchmark's aggregate rate (all actors' bytes over the time from
# the first actor's start to the last one's end, from iggy-bench's per-actor log
# lines), the actors' spread, and the paired ratio (the median of each repetition's
# sluice / Iggy); see parse_results and paired_ratio. It also gives the CPU seconds of
# the measured iggy-bench run itself: the client shares the cores with the server.
#
# Output: the markdown report goes to stdout and to <out>/report.md; every run's
# server log and iggy-bench output are kept in <out>. A run that fails, times out
# or prints no result line counts as FAIL, and its logs are named in the report.
# CPU seconds are the server's user + system time during the measured iggy-bench
# run only (the PREP run excluded); peak RSS is the server's VmHWM over its whole
# life (PREP included). Both sum over the server's process tree.

set -uo pipefail

DEFAULT_SPECS=(
    "balanced-producer tcp"
    "balanced-producer tcp => balanced-consumer-group tcp"
    "balanced-producer-and-consumer-group tcp"
    "end-to-end-producing-consumer-group tcp"
)

IGGY_SERVER=${IGGY_SERVER:-}
IGGY_BENCH=${IGGY_BENCH:-}
SLUICE=${SLUICE:-}
IGGY_CONFIG=${IGGY_CONFIG:-}
REPS=${REPS:-3}
BENCH_GLOBAL=${BENCH_GLOBAL:--T 500MB -m 1000 -P 1000}
SERVERS=${SERVERS:-iggy sluice}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-300}
TCP_ADDR=${TCP_ADDR:-127.0.0.1:8090}
HTTP_ADDR=${HTTP_ADDR:-127.0.0.1:3000}
OUT_DIR=${OUT_DIR:-}
KEEP_DATA=${KEEP_DATA:-0}
SLUICE_LOG=${SLUICE_LOG:-info}
WARM_MIB=${WARM_MIB:-4096}
SYNC_REF=${SYNC_REF:-0}
DROP_CACHES=${DROP_CACHES:-0}

usage() {
    sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"
    exit "${1:-0}"
}

die() {
    echo "bench-vs-iggy: $*" >&2
    exit 2
}

SPECS=()
while (($#)); do
    case $1 in
        --iggy-server) IGGY_SERVER=$2; shift 2 ;;
        --iggy-bench) IGGY_BENCH=$2; shift 2 ;;
        --sluice) SLUICE=$2; shift 2 ;;
        --iggy-config) IGGY_CONFIG=$2; shift 2 ;;
        -n | --reps) REPS=$2; shift 2 ;;
        --global) BENCH_GLOBAL=$2; shift 2 ;;
        --servers) SERVERS=$2; shift 2 ;;
        --timeout) BENCH_TIMEOUT=$2; shift 2 ;;
        --tcp-addr) TCP_ADDR=$2; shift 2 ;;
        --http-addr) HTTP_ADDR=$2; shift 2 ;;
        --out) OUT_DIR=$2; shift 2 ;;
        --keep-data) KEEP_DATA=1; shift ;;
        --sluice-log) SLUICE_LOG=$2; shift 2 ;;
        --warm-mib) WARM_MIB=$2; shift 2 ;;
        --sync-ref) SYNC_REF=$2; shift 2 ;;
        --drop-caches) DROP_CACHES=1; shift ;;
        -h | --help) usage 0 ;;
        --) shift; SPECS+=("$@"); break ;;
        -*) die "unknown option $1 (--help lists them)" ;;
        *) SPECS+=("$1"); shift ;;
    esac
done
((${#SPECS[@]})) || SPECS=("${DEFAULT_SPECS[@]}")

[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer"
[[ $WARM_MIB =~ ^[0-9]+$ ]] || die "--warm-mib must be a number of MiB"
[[ $SYNC_REF =~ ^[0-9]+$ ]] || die "--sync-ref must be a number of writers"
if ((SYNC_REF > 0)); then
    command -v python3 >/dev/null || die "--sync-ref needs python3"
fi
[[ -n $IGGY_BENCH && -x $IGGY_BENCH ]] || die "iggy-bench not executable: '${IGGY_BENCH}' (--iggy-bench)"
read -r -a SERVER_LIST <<<"$SERVERS"
for s in "${SERVER_LIST[@]}"; do
    case $s in
        iggy)
            [[ -n $IGGY_SERVER && -x $IGGY_SERVER ]] || die "iggy-server not executable: '${IGGY_SERVER}' (--iggy-server)"
            if [[ -z $IGGY_CONFIG ]]; then
                IGGY_CONFIG=$(cd "$(dirname "$IGGY_SERVER")/../.." && pwd)/core/server/config.toml
            fi
            [[ -f $IGGY_CONFIG ]] || die "Iggy's config.toml not found at '$IGGY_CONFIG' (--iggy-config)"
            IGGY_CONFIG=$(cd "$(dirname "$IGGY_CONFIG")" && pwd)/$(basename "$IGGY_CONFIG")
            ;;
        sluice)
            [[ -n $SLUICE && -x $SLUICE ]] || die "sluice not executable: '${SLUICE}' (--sluice)"
            ;;
        *) die "unknown server '$s' in --servers (iggy, sluice)" ;;
    esac
done

if [[ -z $OUT_DIR ]]; then
    OUT_DIR=$(mktemp -d /tmp/bench-vs-iggy.XXXXXX)
else
    mkdir -p "$OUT_DIR" || die "cannot create $OUT_DIR"
fi
OUT_DIR=$(cd "$OUT_DIR" && pwd)
RESULTS=$OUT_DIR/results.tsv
SYNC_RESULTS=$OUT_DIR/sync-reference.tsv
: >"$RESULTS"
CLK_TCK=$(getconf CLK_TCK)

SERVER_PID=
DATA_DIR=
cleanup() {
    if [[ -n $SERVER_PID ]]; then
        stop_server
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- helpers -----------------------------------------------------------------

# All pids of the process tree rooted at $1 (by parent pid, not by name).
tree_pids() {
    local pid=$1 child
    echo "$pid"
    for child in $(pgrep -P "$pid" 2>/dev/null); do
        tree_pids "$child"
    done
}

# User + system CPU ticks of the tree rooted at $1.
tree_cpu_ticks() {
    local total=0 pid stat rest
    for pid in $(tree_pids "$1"); do
        stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
        rest=${stat##*) }
        # After "comm) ": state is field 3, utime field 14, stime field 15.
        read -r -a f <<<"$rest"
        total=$((total + f[11] + f[12]))
    done
    echo "$total"
}

# Summed VmHWM (peak resident set, KiB) of the tree rooted at $1.
tree_peak_rss_kib() {
    local total=0 pid kib
    for pid in $(tree_pids "$1"); do
        kib=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
        total=$((total + ${kib:-0}))
    done
    echo "$total"
}

port_open() {
    local host=${1%:*} port=${1##*:}
    (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
}

loadavg() {
    cut -d' ' -f1-3 /proc/loadavg
}

# warm_page_cache: writes and deletes WARM_MIB MiB in /tmp (see --warm-mib).
warm_page_cache() {
    if ((DROP_CACHES)); then
        sync
        echo 3 >/proc/sys/vm/drop_caches || die "--drop-caches: cannot write /proc/sys/vm/drop_caches (root?)"
    fi
    ((WARM_MIB > 0)) || return 0
    local f
    f=$(mktemp /tmp/bench-vs-iggy-warm.XXXXXX)
    dd if=/dev/zero of="$f" bs=1M count="$WARM_MIB" status=none
    rm -f "$f"
}

# start_server NAME LOG: starts NAME on a fresh data directory; sets SERVER_PID.
start_server() {
    local name=$1 log=$2
    warm_page_cache
    for addr in "$TCP_ADDR" "$HTTP_ADDR"; do
        if port_open "$addr"; then
            echo "bench-vs-iggy: $addr is already in use; is another server running?" >&2
            return 1
        fi
    done
    DATA_DIR=$(mktemp -d "/tmp/bench-vs-iggy-data-$name.XXXXXX")
    case $name in
        iggy)
            # Run from the data directory so that no stray .env is picked up.
            (cd "$DATA_DIR" && exec env \
                IGGY_CONFIG_PATH="$IGGY_CONFIG" \
                IGGY_SYSTEM_PATH="$DATA_DIR/local_data" \
                IGGY_TCP_ADDRESS="$TCP_ADDR" \
                IGGY_HTTP_ADDRESS="$HTTP_ADDR" \
                IGGY_QUIC_ENABLED=false \
                IGGY_WEBSOCKET_ENABLED=false \
                IGGY_ROOT_USERNAME=iggy \
                IGGY_ROOT_PASSWORD=iggy \
                "$IGGY_SERVER" >"$log" 2>&1) &
            ;;
        sluice)
            (cd "$DATA_DIR" && exec env \
                RUST_LOG="$SLUICE_LOG" \
                SLUICE_ROOT_USERNAME=iggy \
                SLUICE_ROOT_PASSWORD=iggy \
                "$SLUICE" server \
                --data-dir "$DATA_DIR/local_data" \
                --tcp-addr "$TCP_ADDR" \
                --http-addr "$HTTP_ADDR" >"$log" 2>&1) &
            ;;
    esac
    SERVER_PID=$!
    local waited=0
    until port_open "$TCP_ADDR" && port_open "$HTTP_ADDR"; do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            echo "bench-vs-iggy: $name exited during start-up, see $log" >&2
            SERVER_PID=
            return 1
        fi
        if ((waited >= 600)); then
            echo "bench-vs-iggy: $name did not open $TCP_ADDR and $HTTP_ADDR in 60 s, see $log" >&2
            return 1
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    sleep 0.5
}

stop_server() {
    local pid=$SERVER_PID waited=0
    SERVER_PID=
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        while kill -0 "$pid" 2>/dev/null && ((waited < 300)); do
            sleep 0.1
            waited=$((waited + 1))
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "bench-vs-iggy: server $pid ignored SIGTERM for 30 s; SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null
        fi
    fi
    wait "$pid" 2>/dev/null
    # Wait for the ports to be released before the next server binds them.
    waited=0
    while { port_open "$TCP_ADDR" || port_open "$HTTP_ADDR"; } && ((waited < 100)); do
        sleep 0.1
        waited=$((waited + 1))
    done
    if [[ $KEEP_DATA != 1 && -n $DATA_DIR ]]; then
        rm -rf "$DATA_DIR"
    fi
    DATA_DIR=
}

# bench_args SPEC: prints iggy-bench's argument list, one per line, with the
# global options first and --server-address added after the transport word.
bench_args() {
    local spec=$1 words w addr has_addr=0 out=()
    read -r -a words <<<"$BENCH_GLOBAL $spec"
    for w in "${words[@]}"; do
        [[ $w == --server-address* ]] && has_addr=1
    done
    for w in "${words[@]}"; do
        out+=("$w")
        if ((!has_addr)); then
            case $w in
                tcp) addr=$TCP_ADDR ;;
                http) addr=$HTTP_ADDR ;;
                *) addr= ;;
            esac
            [[ -n $addr ]] && out+=(--server-address "$addr")
        fi
    done
    printf '%s\n' "${out[@]}"
}

# run_bench SPEC LOG: runs iggy-bench with the spec's arguments; returns its status
# (124 on timeout).
run_bench() {
    local spec=$1 log=$2 args
    mapfile -t args < <(bench_args "$spec")
    {
        printf '$ iggy-bench'
        printf ' %q' "${args[@]}"
        printf '\n'
    } >"$log"
    # The builtin `times`, written without a subshell, gives the CPU of this
    # shell's reaped children so far: the run's own is the difference.
    times >"$log.cpu0"
    NO_COLOR=1 timeout --kill-after=10 "$BENCH_TIMEOUT" "$IGGY_BENCH" "${args[@]}" >>"$log" 2>&1 </dev/null
    local rc=$?
    times >"$log.cpu1"
    return "$rc"
}

# client_cpu LOG: the CPU seconds (user + system) of the iggy-bench run that
# wrote LOG (run_bench's two `times` snapshots; their second line is the
# children's "XmY.YYYs XmY.YYYs").
client_cpu() {
    local log=$1
    awk 'function secs(t,   m) { gsub(/,/, ".", t); m = t; sub(/m.*/, "", m); sub(/^[0-9]+m/, "", t); sub(/s$/, "", t); return m * 60 + t }
        FNR == 2 { v[FILENAME] = secs($1) + secs($2) }
        END { printf "%.2f\n", v[ARGV[2]] - v[ARGV[1]] }' "$log.cpu0" "$log.cpu1" 2>/dev/null || echo "-"
    rm -f "$log.cpu0" "$log.cpu1"
}

# parse_results LOG: prints "kind<TAB>MB/s<TAB>msg/s<TAB>p50<TAB>p99<TAB>aggregate MB/s
# <TAB>spread" per result line. MB/s is iggy-bench's "Total throughput", which is
# the sum of each actor's own rate (from that actor's sampled time series): a server that
# serves the actors one after another scores higher on it than one that serves them
# together at the same total rate. So the aggregate is computed too, from the same
# log's per-actor lines ("Producer #1 → sent ... in 0.96 s, total size: 125.00 MB",
# logged when the actor ends): all the actors' bytes over the time from the first
# actor's start (its end minus its time) to the last one's end. The spread is the
# longest actor time over the shortest.
parse_results() {
    sed 's/\x1b\[[0-9;]*m//g' "$1" | awk '
        function field(re, prefix, suffix,   s) {
            if (!match($0, re)) return "-"
            s = substr($0, RSTART, RLENGTH)
            return substr(s, length(prefix) + 1, length(s) - length(prefix) - length(suffix))
        }
        # Days since 1970-01-01 of a civil date (mawk has no mktime).
        function epoch_day(y, m, d,   era, yoe, doy, doe) {
            y -= (m <= 2)
            era = int(y / 400)
            yoe = y - era * 400
            doy = int((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + d - 1
            doe = yoe * 365 + int(yoe / 4) - int(yoe / 100) + doy
            return era * 146097 + doe - 719468
        }
        # Seconds since the epoch of a leading "2026-12-05T02:17:01.679413Z".
        function stamp(s) {
            return epoch_day(substr(s, 1, 4) + 0, substr(s, 6, 2) + 0, substr(s, 9, 2) + 0) * 86400 \
                + substr(s, 12, 2) * 3600 + substr(s, 15, 2) * 60 + substr(s, 18)
        }
        function megabytes(n, unit) {
            if (unit == "B") return n / 1e6
            if (unit == "KB") return n / 1e3
            if (unit == "GB") return n * 1e3
            if (unit == "TB") return n * 1e6
            if (unit == "KiB") return n * 1024 / 1e6
            if (unit == "MiB") return n * 1048576 / 1e6
            if (unit == "GiB") return n * 1073741824 / 1e6
            return n
        }
        function note(kind, t, took, mb) {
            if (!(kind in first) || t - took < first[kind]) first[kind] = t - took
            if (!(kind in last) || t > last[kind]) last[kind] = t
            if (!(kind in shortest) || took < shortest[kind]) shortest[kind] = took
            if (!(kind in longest) || took > longest[kind]) longest[kind] = took
            bytes[kind] += mb
        }
        match($0, /^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9:.]+Z .*(Producer|Consumer|ProducingConsumer) #[0-9]+ → (sent|polled).* in [0-9.]+ s, total size: [0-9.]+ [KMGT]?i?B,/) {
            t = stamp($1)
            took = field("in [0-9.]+ s, total size", "in ", " s, total size") + 0
            size = field("total size: [0-9.]+ [KMGT]?i?B", "total size: ", "")
            split(size, sz, " ")
            mb = megabytes(sz[1] + 0, sz[2])
            actor = $0
            sub(/ #[0-9]+ → .*/, "", actor)
            sub(/.* /, "", actor)
            kind = actor == "Producer" ? "Producers" : actor == "Consumer" ? "Consumers" : "Producing Consumer"
            note(kind, t, took, mb)
            if (kind != "Producing Consumer") note("Aggregate", t, took, mb)
            next
        }
        match($0, /(Producers|Consumers|Aggregate|Producing Consumer) Results: Total throughput:/) {
            kind = substr($0, RSTART, RLENGTH)
            sub(/ Results: .*/, "", kind)
            results[++n] = kind
            line[n] = sprintf("%s\t%s\t%s\t%s\t%s", kind,
                field("Total throughput: [0-9.]+ MB/s", "Total throughput: ", " MB/s"),
                field("MB/s, [0-9]+ messages/s", "MB/s, ", " messages/s"),
                field("p50 latency: [0-9.]+ ms", "p50 latency: ", " ms"),
                field("p99 latency: [0-9.]+ ms", "p99 latency: ", " ms"))
        }
        END {
            for (i = 1; i <= n; i++) {
                k = results[i]
                agg = "-"; spread = "-"
                if ((k in bytes) && last[k] > first[k]) agg = sprintf("%.2f", bytes[k] / (last[k] - first[k]))
                if ((k in shortest) && shortest[k] > 0) spread = sprintf("%.2f", longest[k] / shortest[k])
                printf "%s\t%s\t%s\n", line[i], agg, spread
            }
        }'
}

# spec_name SPEC: "subcommand (transport)" of the measured part of SPEC.
spec_name() {
    local words w name='' transport=''
    read -r -a words <<<"${1#*=>}"
    for w in "${words[@]}"; do
        case $w in
            tcp | http | quic | websocket) transport=$w ;;
            -*) ;;
            *) [[ -z $name && $w =~ ^[a-z]+(-[a-z]+)+$ ]] && name=$w ;;
        esac
    done
    echo "$name${transport:+ ($transport)}"
}

pretty_server() {
    case $1 in
        iggy) echo "Iggy" ;;
        sluice) echo "sluice" ;;
    esac
}

# option_value NAME WORDS...: the value after the last NAME (-T, -m, -P) in the
# words ("-" when absent).
option_value() {
    local name=$1 w prev= value=-
    shift
    for w in "$@"; do
        [[ $prev == "$name" ]] && value=$w
        prev=$w
    done
    echo "$value"
}

# sync_reference SPEC: prints the MB/s (decimal, as iggy-bench's) of SYNC_REF writers
# appending the spec's -T bytes in (-m x -P)-byte writes, each followed by fdatasync.
sync_reference() {
    local words total size batch
    read -r -a words <<<"$BENCH_GLOBAL ${1#*=>}"
    total=$(option_value -T "${words[@]}")
    size=$(option_value -m "${words[@]}")
    batch=$(option_value -P "${words[@]}")
    # Fixed sizes only: a range (-m 100..1000) has no one write size.
    [[ $total != - && $size =~ ^[1-9][0-9]*$ && $batch =~ ^[1-9][0-9]*$ ]] || { echo "-"; return; }
    python3 - "$SYNC_REF" "$total" "$((size * batch))" <<'PY' || echo "-"
import os, re, sys, tempfile, threading, time
writers, total, block = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
# iggy-bench's sizes: decimal units (KB, MB, GB, TB) or binary ones (KiB, ...).
m = re.fullmatch(r"([0-9.]+)\s*([KMGT]?)(I?)B?", total.strip().upper())
if not m:
    sys.exit(1)
power = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}[m.group(2)]
total = int(float(m.group(1)) * (1024 if m.group(3) else 1000) ** power)
per_writer = total // block // writers
if per_writer < 1:
    sys.exit(1)
buf = b"\x5a" * block
where = tempfile.mkdtemp(prefix="bench-vs-iggy-sync-", dir="/tmp")
def write(i):
    fd = os.open(os.path.join(where, str(i)), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    for _ in range(per_writer):
        os.write(fd, buf)
        os.fdatasync(fd)
    os.close(fd)
threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
start = time.monotonic()
for t in threads: t.start()
for t in threads: t.join()
took = time.monotonic() - start
for i in range(writers): os.unlink(os.path.join(where, str(i)))
os.rmdir(where)
print(f"{per_writer * writers * block / took / 1e6:.2f}")
PY
}

# --- the runs ----------------------------------------------------------------

LOAD_START=$(loadavg)
START_DATE=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
echo "bench-vs-iggy: logs in $OUT_DIR; load average at start: $LOAD_START" >&2

for si in "${!SPECS[@]}"; do
    spec=${SPECS[$si]}
    prep=
    measured=$spec
    if [[ $spec == *"=>"* ]]; then
        prep=${spec%%=>*}
        measured=${spec#*=>}
    fi
    for ((rep = 1; rep <= REPS; rep++)); do
        for server in "${SERVER_LIST[@]}"; do
            tag=$(printf '%02d-%s-%d' "$((si + 1))" "$server" "$rep")
            slog=$OUT_DIR/$tag.server.log
            blog=$OUT_DIR/$tag.bench.log
            echo "bench-vs-iggy: [$((si + 1))/${#SPECS[@]}] rep $rep/$REPS $server: $measured" >&2
            if ! start_server "$server" "$slog"; then
                printf '%s\t%s\t%s\tFAIL\tstart\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\n' "$si" "$server" "$rep" >>"$RESULTS"
                [[ -n $SERVER_PID ]] && stop_server
                continue
            fi
            status=ok
            if [[ -n $prep ]]; then
                run_bench "$prep" "$OUT_DIR/$tag.prep.log"
                rc=$?
                rm -f "$OUT_DIR/$tag.prep.log.cpu0" "$OUT_DIR/$tag.prep.log.cpu1"
                if ((rc != 0)); then
                    status="prep-exit-$rc"
                    ((rc == 124)) && status="prep-timeout"
                fi
            fi
            cpu0=$(tree_cpu_ticks "$SERVER_PID")
            t0=$(date +%s.%N)
            if [[ $status == ok ]]; then
                run_bench "$measured" "$blog"
                rc=$?
                if ((rc != 0)); then
                    status="exit-$rc"
                    ((rc == 124)) && status="timeout"
                fi
            fi
            t1=$(date +%s.%N)
            cpu1=$(tree_cpu_ticks "$SERVER_PID")
            client=-
            [[ -f $blog.cpu1 ]] && client=$(client_cpu "$blog")
            rss=$(tree_peak_rss_kib "$SERVER_PID")
            alive=1
            kill -0 "$SERVER_PID" 2>/dev/null || alive=0
            stop_server
            ((alive)) || status="$status,server-died"
            cpu=$(awk -v a="$cpu0" -v b="$cpu1" -v t="$CLK_TCK" 'BEGIN { printf "%.2f", (b - a) / t }')
            wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
            rss_mib=$(awk -v k="$rss" 'BEGIN { printf "%.1f", k / 1024 }')
            lines=$([[ -f $blog ]] && parse_results "$blog")
            if [[ $status == ok && -z $lines ]]; then
                status=no-result
            fi
            if [[ $status == ok ]]; then
                while IFS=$'\t' read -r kind mb msg p50 p99 agg spread; do
                    printf '%s\t%s\t%s\tok\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
                        "$si" "$server" "$rep" "$kind" "$mb" "$msg" "$p50" "$p99" "$cpu" "$rss_mib" "$wall" "$agg" "$spread" "$client" >>"$RESULTS"
                done <<<"$lines"
            else
                printf '%s\t%s\t%s\tFAIL\t%s\t-\t-\t-\t-\t%s\t%s\t%s\t-\t-\t%s\n' \
                    "$si" "$server" "$rep" "$status" "$cpu" "$rss_mib" "$wall" "$client" >>"$RESULTS"
                echo "bench-vs-iggy: FAIL ($status): $blog, $slog" >&2
            fi
        done
        if ((SYNC_REF > 0)) && [[ " $BENCH_GLOBAL $measured " == *" --enforce-fsync "* ]]; then
            warm_page_cache
            echo "bench-vs-iggy: [$((si + 1))/${#SPECS[@]}] rep $rep/$REPS write + fdatasync reference, $SYNC_REF writers" >&2
            printf '%s\t%s\t%s\n' "$si" "$rep" "$(sync_reference "$spec")" >>"$SYNC_RESULTS"
        fi
    done
done
LOAD_END=$(loadavg)

# --- the report --------------------------------------------------------------

# median FILTER-OUTPUT: median of the numbers on stdin ("-" when there are none).
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "-"; exit }
        if (NR % 2) { m = v[(NR + 1) / 2] } else { m = (v[NR / 2] + v[NR / 2 + 1]) / 2 }
        if (m == int(m) && m >= 1000) printf "%d\n", m; else printf "%.2f\n", m
    }'
}

# col SPEC SERVER KIND COLUMN: the values of one column of the ok rows.
col() {
    awk -F'\t' -v s="$1" -v srv="$2" -v k="$3" -v c="$4" \
        '$1 == s && $2 == srv && $4 == "ok" && $5 == k && $c != "-" { print $c }' "$RESULTS"
}

# Per-run resource columns (one value per run, ok or not).
run_col() {
    awk -F'\t' -v s="$1" -v srv="$2" -v c="$3" \
        '$1 == s && $2 == srv && $c != "-" && !seen[$3]++ { print $c }' "$RESULTS"
}

# result_kinds SPEC: the result kinds (Producers, Consumers, ...) of the spec's ok
# rows, in the order first seen.
result_kinds() {
    awk -F'\t' -v s="$1" '$1 == s && $4 == "ok" && !seen[$5]++ { print $5 }' "$RESULTS"
}

# paired_ratio SPEC KIND COLUMN: the median over repetitions of sluice's value over
# Iggy's in the same repetition (the two ran back to back, so a drift in the
# machine's speed between repetitions cancels out), "-" without a pair.
paired_ratio() {
    awk -F'\t' -v s="$1" -v k="$2" -v c="$3" '
        $1 == s && $4 == "ok" && $5 == k && $c != "-" { v[$2, $3] = $c; reps[$3] = 1 }
        END { for (r in reps) if ((("iggy", r) in v) && (("sluice", r) in v) && v["iggy", r] + 0 > 0) print v["sluice", r] / v["iggy", r] }
    ' "$RESULTS" | median
}

ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f\n", a / b }'
}

has() {
    local s
    for s in "${SERVER_LIST[@]}"; do [[ $s == "$1" ]] && return 0; done
    return 1
}

{
    echo "## iggy-bench: Iggy vs sluice"
    echo
    echo "- date: $START_DATE; repetitions per server: $REPS; order per spec: ${SERVERS// /, }, alternating"
    echo "- load average (1/5/15 min): start $LOAD_START, end $LOAD_END; cores: $(nproc)"
    has iggy && echo "- Iggy server: \`$IGGY_SERVER\` (config \`$IGGY_CONFIG\`)"
    has sluice && echo "- sluice: \`$SLUICE\` ($("$SLUICE" --version 2>/dev/null || echo '?'))"
    echo "- iggy-bench: \`$IGGY_BENCH\`; global options: \`$BENCH_GLOBAL\`; TCP $TCP_ADDR, HTTP $HTTP_ADDR"
    echo "- logs: \`$OUT_DIR\`"
    echo
    echo "Medians of the runs that completed. MB/s and msg/s are iggy-bench's \"Total throughput\";"
    echo "p50/p99 are its average per-actor latency percentiles, in ms."
    echo
    echo "| # | benchmark | results | Iggy MB/s | sluice MB/s | sluice/Iggy | Iggy msg/s | sluice msg/s | Iggy p50 | sluice p50 | Iggy p99 | sluice p99 | completed Iggy / sluice |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for si in "${!SPECS[@]}"; do
        name=$(spec_name "${SPECS[$si]}")
        ok_i=$(awk -F'\t' -v s="$si" '$1 == s && $2 == "iggy" && $4 == "ok" && !seen[$3]++' "$RESULTS" | wc -l)
        ok_s=$(awk -F'\t' -v s="$si" '$1 == s && $2 == "sluice" && $4 == "ok" && !seen[$3]++' "$RESULTS" | wc -l)
        has iggy || ok_i=-
        has sluice || ok_s=-
        kinds=$(result_kinds "$si")
        if [[ -z $kinds ]]; then
            echo "| $((si + 1)) | $name | FAIL | - | - | - | - | - | - | - | - | - | $ok_i/$REPS / $ok_s/$REPS |"
            continue
        fi
        while read -r kind; do
            mi=$(col "$si" iggy "$kind" 6 | median)
            ms=$(col "$si" sluice "$kind" 6 | median)
            echo "| $((si + 1)) | $name | $kind | $mi | $ms | $(ratio "$ms" "$mi") | $(col "$si" iggy "$kind" 7 | median) | $(col "$si" sluice "$kind" 7 | median) | $(col "$si" iggy "$kind" 8 | median) | $(col "$si" sluice "$kind" 8 | median) | $(col "$si" iggy "$kind" 9 | median) | $(col "$si" sluice "$kind" 9 | median) | $ok_i/$REPS / $ok_s/$REPS |"
        done <<<"$kinds"
    done
    echo
    echo "The same runs' aggregate rate: each run's actors' bytes over the time from the first"
    echo "actor's start to the last one's end, from iggy-bench's per-actor log lines (its \"Total"
    echo "throughput\" above sums each actor's own rate, which rewards serving actors one after"
    echo "another); spread: the longest actor's time over the shortest's. Medians; the paired"
    echo "ratio is the median of each repetition's sluice / Iggy (the two ran back to back)."
    echo
    echo "| # | benchmark | results | Iggy aggregate MB/s | sluice aggregate MB/s | sluice/Iggy | paired sluice/Iggy, Total / aggregate | Iggy spread | sluice spread |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for si in "${!SPECS[@]}"; do
        name=$(spec_name "${SPECS[$si]}")
        kinds=$(result_kinds "$si")
        [[ -z $kinds ]] && continue
        while read -r kind; do
            ai=$(col "$si" iggy "$kind" 13 | median)
            as=$(col "$si" sluice "$kind" 13 | median)
            echo "| $((si + 1)) | $name | $kind | $ai | $as | $(ratio "$as" "$ai") | $(paired_ratio "$si" "$kind" 6) / $(paired_ratio "$si" "$kind" 13) | $(col "$si" iggy "$kind" 14 | median) | $(col "$si" sluice "$kind" 14 | median) |"
        done <<<"$kinds"
    done
    echo
    echo "Server resources, medians over all runs: CPU seconds (user + system) during the measured"
    echo "iggy-bench run, peak RSS (VmHWM, MiB) over the server's life, wall seconds of the measured run;"
    echo "and the CPU seconds of the measured iggy-bench run itself (the client, on the same cores)."
    echo
    echo "| # | benchmark | Iggy CPU s | sluice CPU s | Iggy peak RSS MiB | sluice peak RSS MiB | Iggy wall s | sluice wall s | client CPU s with Iggy / sluice |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for si in "${!SPECS[@]}"; do
        name=$(spec_name "${SPECS[$si]}")
        echo "| $((si + 1)) | $name | $(run_col "$si" iggy 10 | median) | $(run_col "$si" sluice 10 | median) | $(run_col "$si" iggy 11 | median) | $(run_col "$si" sluice 11 | median) | $(run_col "$si" iggy 12 | median) | $(run_col "$si" sluice 12 | median) | $(run_col "$si" iggy 15 | median) / $(run_col "$si" sluice 15 | median) |"
    done
    if [[ -s $SYNC_RESULTS ]]; then
        echo
        echo "The disk's write + fdatasync for the same bytes ($SYNC_REF writers, one new file each,"
        echo "one write of -m x -P bytes then fdatasync, repeated), measured after each repetition's"
        echo "servers; medians, and each server's producer MB/s over it:"
        echo
        echo "| # | benchmark | write + fdatasync MB/s | Iggy / reference | sluice / reference |"
        echo "|---|---|---|---|---|"
        for si in "${!SPECS[@]}"; do
            ref=$(awk -F'\t' -v s="$si" '$1 == s && $3 != "-" && $3 != "" { print $3 }' "$SYNC_RESULTS" | median)
            [[ $ref == - ]] && continue
            echo "| $((si + 1)) | $(spec_name "${SPECS[$si]}") | $ref | $(ratio "$(col "$si" iggy Producers 6 | median)" "$ref") | $(ratio "$(col "$si" sluice Producers 6 | median)" "$ref") |"
        done
    fi
    echo
    echo "Commands (iggy-bench; PREP runs first on the same server and is not measured):"
    echo
    for si in "${!SPECS[@]}"; do
        spec=${SPECS[$si]}
        # shellcheck disable=SC2016 # the backticks are markdown
        if [[ $spec == *"=>"* ]]; then
            printf -- '%s. PREP `iggy-bench %s`\n   then `iggy-bench %s`\n' "$((si + 1))" \
                "$(bench_args "${spec%%=>*}" | paste -sd' ')" "$(bench_args "${spec#*=>}" | paste -sd' ')"
        else
            printf -- '%s. `iggy-bench %s`\n' "$((si + 1))" "$(bench_args "$spec" | paste -sd' ')"
        fi
    done
    fails=$(awk -F'\t' '$4 == "FAIL"' "$RESULTS")
    if [[ -n $fails ]]; then
        echo
        echo "Failed runs (spec #, server, repetition, reason; logs <out>/NN-server-rep.{bench,prep,server}.log):"
        echo
        while IFS=$'\t' read -r si server rep _ reason _; do
            echo "- #$((si + 1)) $(pretty_server "$server") rep $rep: $reason"
        done <<<"$fails"
    fi
} | tee "$OUT_DIR/report.md"
