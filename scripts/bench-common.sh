# shellcheck shell=bash
# Sourced by scripts/bench-http and scripts/bench-grpc: waiting for a server, a process's CPU
# time, and the ratio summary.

# Waits until TCP port $1 on 127.0.0.1 accepts connections (30 s at most).
wait_for_port() {
  for _ in $(seq 1 60); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.5
  done
  echo "nothing listens on port $1" >&2
  return 1
}

# The CPU time of the processes given (their threads included) so far, in microseconds: user +
# system, from /proc/PID/stat, whose fields 14 and 15 count clock ticks.
cpu_us() {
  local ticks=0 pid
  for pid in "$@"; do
    ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo $((ticks * 1000000 / $(getconf CLK_TCK)))
}

# A latency as wrk prints it (850.00us, 1.20ms, 2.00s), in microseconds.
to_us() {
  awk -v v="$1" 'BEGIN {
    n = v + 0
    if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000; else if (v ~ /s$/) print n * 1000000
    else print n }'
}

# Reads lines "CASE RATIO" on stdin; prints each case's ratios (lowest, median, highest) and their
# geometric mean.
summarise_ratios() {
  sort -k1,1 -k2,2n | awk '
    { values[$1] = values[$1] " " $2; count[$1]++; logs[$1] += log($2) }
    END {
      for (c in count) {
        n = split(substr(values[c], 2), v, " ")
        median = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        printf "%-28s ratios %s  (lowest %.2f, median %.2f, highest %.2f, geometric mean %.2f)\n",
               c, substr(values[c], 2), v[1], median, v[n], exp(logs[c] / count[c])
      }
    }' | sort
}
