#!/bin/sh
# Runs build/bench/cgroup_limit under each allocator, each in a fresh child
# of this process's cgroup v1 memory cgroup with the same limit
# (memory.limit_in_bytes), and libarena once more with no limit (the
# baseline for its throughput).  Prints a Markdown table: exit (killed?),
# OOM kills, memory.failcnt, memory.max_usage_in_bytes, throughput.
# Usage: bench/cgroup_limit.sh [LIMIT_MIB] [REPS] [-- cgroup_limit args]
# CGL_ALSO="name=/path/lib.so ...": more rows under the limit (another
# build of libarena, say), in the same rounds.
set -u
LIMIT=${1:-256}; REPS=${2:-3}
shift 2 2>/dev/null; [ "${1:-}" = "--" ] && shift
ARGS="-L $LIMIT $*"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/build/bench/cgroup_limit
LIBS=/usr/lib/x86_64-linux-gnu
CGP=$(awk -F: '$2=="memory"{print $3}' /proc/self/cgroup)
BASE=/sys/fs/cgroup/memory${CGP%/}
[ -x "$BIN" ] || { echo "build it first: make build/bench/cgroup_limit" >&2; exit 1; }
run() { # name preload limit_bytes
	cg=$BASE/arena-bench-$$-$1
	mkdir "$cg" || exit 1
	[ "$3" -gt 0 ] && echo "$3" > "$cg/memory.limit_in_bytes"
	out=$(sh -c "echo \$\$ > $cg/cgroup.procs; exec env LD_PRELOAD=$2 $BIN $ARGS" 2>&1); rc=$?
	kills=$(awk '$1=="oom_kill"{print $2}' "$cg/memory.oom_control")
	echo "| $1 | $([ $rc -eq 0 ] && echo ok || echo "exit $rc") | ${kills:-0} | $(cat $cg/memory.failcnt) | $(( $(cat $cg/memory.max_usage_in_bytes) >> 20 )) | $(echo "$out" | sed -n 's/.*mops=\([0-9.]*\).*/\1/p') |"
	rmdir "$cg"
}
echo "limit $LIMIT MiB; cgroup_limit $ARGS; $REPS runs each"
echo
echo "| allocator | exit | OOM kills | failcnt | peak usage MiB | M ops/s |"
echo "|---|---|---|---|---|---|"
for rep in $(seq "$REPS"); do
	run "libarena-unlimited" "$ROOT/build/libarena.so" 0
	run libarena "$ROOT/build/libarena.so" $((LIMIT << 20))
	run glibc "" $((LIMIT << 20))
	run jemalloc $LIBS/libjemalloc.so.2 $((LIMIT << 20))
	run tcmalloc $LIBS/libtcmalloc_minimal.so.4 $((LIMIT << 20))
	run mimalloc $LIBS/libmimalloc.so.2 $((LIMIT << 20))
	for also in ${CGL_ALSO:-}; do
		run "${also%%=*}" "${also#*=}" $((LIMIT << 20))
	done
done
