#!/usr/bin/env bash
# slurm-local.sh -- a real single-node Slurm cluster on this machine, for CI and
# for anyone who wants kgate's Slurm path on one box.
#
# Usage:
#   scripts/slurm-local.sh start  [--root DIR] [--accounting] [--partition NAME]
#   scripts/slurm-local.sh stop   [--root DIR]
#   scripts/slurm-local.sh status [--root DIR]
#   scripts/slurm-local.sh restart [same options as start]
#
# What it does:
#   start   installs the Debian packages when missing (slurmctld slurmd
#           slurm-client munge; with --accounting also slurmdbd mariadb-server),
#           writes /etc/slurm/slurm.conf + gres.conf, starts munged (only if no
#           munged answers yet), slurmctld and slurmd, waits until the node is
#           idle and prints `sinfo`. Idempotent: when its daemons are already
#           up in the same mode it only prints `sinfo`. Exits non-zero with the
#           daemon logs' tail when the node does not come up.
#   stop    stops only the daemons this script started, by the pid files under
#           the root directory. Idempotent.
#   status  prints node and queue state; exits 1 when the cluster is not up.
#
# Options:
#   --root DIR        state, spool, logs, pid files, fake GPU devices
#                     (default /tmp/kgate-slurm)
#   --accounting      also run mariadb + slurmdbd, so sacct/sacctmgr work and the
#                     profile's default status command (sacct) can be used;
#                     creates account "kgate" for root. Adds about 4-5 s.
#   --partition NAME  partition name (default debug; it is the default partition)
#
# The cluster: one node "localhost" (NodeAddr 127.0.0.1) with this machine's
# CPUs and memory, 2 fake GPUs declared as gres gpu:tesla:2 (character devices
# cloned from /dev/null under DIR) and node features "ci,gpu,tesla", so
# `srun --gpus=1`, `--gpus=tesla:1`, `--gres=gpu:tesla:2` and `-C tesla` all
# schedule (CUDA_VISIBLE_DEVICES is set; there is no real GPU behind it).
# MinJobAge=300 keeps finished jobs visible to squeue for 5 minutes, which is
# what Snakemake's `slurm-status-command: squeue` needs without accounting.
# KillWait=5 makes time-limited jobs end quickly after SIGTERM.
#
# Requirements: Debian 12 (bookworm), root, no systemd needed. It writes
# /etc/slurm/{slurm.conf,gres.conf[,slurmdbd.conf]} and refuses to overwrite a
# slurm.conf it did not write. Use it with:
#   snakemake --profile profiles/slurm-local     # squeue status, fast polling
# or, after `start --accounting`, with the site profile's sacct polling and a
# site layer that names partition debug, account kgate and gpu_model tesla:
#   snakemake --profile slurm --profile my-local-site.yaml   (see profiles/slurm)
set -euo pipefail

ROOT=/tmp/kgate-slurm
ACCOUNTING=0
PARTITION=debug
CMD=
ETC=/etc/slurm
MARKER="# written by kgate scripts/slurm-local.sh"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    start|stop|status|restart) CMD=$1 ;;
    --root) ROOT=${2:?--root needs a directory}; shift ;;
    --root=*) ROOT=${1#--root=} ;;
    --accounting) ACCOUNTING=1 ;;
    --partition) PARTITION=${2:?--partition needs a name}; shift ;;
    --partition=*) PARTITION=${1#--partition=} ;;
    -h|--help) usage ;;
    *) echo "slurm-local: unknown argument: $1" >&2; usage ;;
  esac
  shift
done
[ -n "$CMD" ] || usage
[[ $PARTITION =~ ^[A-Za-z0-9_-]+$ ]] || { echo "slurm-local: bad partition name: $PARTITION" >&2; exit 2; }
case "$ROOT" in /*) ;; *) ROOT=$PWD/$ROOT ;; esac
MODE="accounting=$ACCOUNTING partition=$PARTITION"

log() { echo "slurm-local: $*" >&2; }
die() { log "$*"; exit 1; }

# alive PIDFILE: the pid in it is a live process (zombies of the daemons' first
# fork linger under a PID 1 that reaps late, so state Z counts as dead)
alive() {
  [ -s "$1" ] || return 1
  local s
  s=$(ps -o stat= -p "$(cat "$1" 2>/dev/null)" 2>/dev/null) || return 1
  [[ $s != Z* ]]
}

# wait_for SECONDS CMD...: retry CMD every 0.2 s
wait_for() {
  local n=$(($1 * 5)); shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}

logs_tail() {
  local f files=("$ROOT/log/slurmctld.log" "$ROOT/log/slurmd.log")
  [ "$ACCOUNTING" = 1 ] && files+=("$ROOT/log/slurmdbd.log" "$ROOT/mysql/err.log")
  for f in "${files[@]}"; do
    [ -s "$f" ] || continue
    echo "---- tail -n 15 $f" >&2; tail -n 15 "$f" >&2
  done
}

# fail_start MESSAGE: node state and the daemons' log tails, stop what started, exit 1
fail_start() {
  log "$1"
  sinfo -N -o '%N %T %E' >&2 2>/dev/null || true
  logs_tail
  stop_daemons
  log "start failed: $1 (logs under $ROOT/log)"
  exit 1
}

packages() {
  local p="slurmctld slurmd slurm-client munge"
  [ "$ACCOUNTING" = 1 ] && p="$p slurmdbd mariadb-server"
  echo "$p"
}

install_packages() {
  local p; p=$(packages)
  # shellcheck disable=SC2086
  dpkg -s $p >/dev/null 2>&1 && return 0
  [ "$(id -u)" = 0 ] || die "packages missing ($p) and not root: install them first"
  command -v apt-get >/dev/null || die "packages missing ($p) and no apt-get (Debian 12 expected)"
  # keep postinst scripts from starting services; we start daemons ourselves
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
  fi
  log "installing $p"
  apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $p >/dev/null
}

write_conf() {
  if [ -e "$ETC/slurm.conf" ] && ! grep -qF "$MARKER" "$ETC/slurm.conf"; then
    die "$ETC/slurm.conf exists and was not written by this script; refusing to overwrite it"
  fi
  mkdir -p "$ROOT"/state "$ROOT"/spool "$ROOT"/log "$ETC"
  local mem acct first
  mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  # job ids continue after a restart (state/ is wiped), so logs named <jobid>.log
  # and accounting records are never reused; jobcomp.txt keeps every ended job
  # (a fresh machine has no jobcomp.txt yet: under pipefail a failing sed would end the script)
  first=
  if [ -f "$ROOT/log/jobcomp.txt" ]; then
    first=$(sed -n 's/^JobId=\([0-9]*\) .*/\1/p' "$ROOT/log/jobcomp.txt" | sort -n | tail -1)
  fi
  first=$(( ${first:-0} + 1 ))
  [ -n "$mem" ] || die "slurmd -C did not report RealMemory"
  if [ "$ACCOUNTING" = 1 ]; then
    acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux"
  else
    acct="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
  fi
  cat >"$ETC/slurm.conf" <<CONF
$MARKER --root $ROOT ($MODE)
ClusterName=kgate
FirstJobId=$first
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
StateSaveLocation=$ROOT/state
SlurmdSpoolDir=$ROOT/spool
SlurmctldPidFile=$ROOT/slurmctld.pid
SlurmdPidFile=$ROOT/slurmd.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
$acct
JobCompType=jobcomp/filetxt
JobCompLoc=$ROOT/log/jobcomp.txt
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
EnforcePartLimits=ALL
ReturnToService=2
MinJobAge=300
KillWait=5
OverTimeLimit=0
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem Gres=gpu:tesla:2 Feature=ci,gpu,tesla State=UNKNOWN
PartitionName=$PARTITION Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
  # slurmd drops GPUs without a device file and rejects regular files, so the
  # fake GPUs are character devices (major 1 minor 3, like /dev/null)
  local i
  for i in 0 1; do
    [ -c "$ROOT/gpu$i" ] || { rm -f "$ROOT/gpu$i"; mknod "$ROOT/gpu$i" c 1 3; }
  done
  printf '%s\nNodeName=localhost Name=gpu Type=tesla File=%s/gpu[0-1]\n' \
    "$MARKER" "$ROOT" >"$ETC/gres.conf"
}

start_munge() {
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --force
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
  fi
  # a munged that already answers (system service or an earlier start) is used
  # as it is and never stopped by this script
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged --pid-file="$ROOT/munge/munged.pid" \
      || fail_start "munged did not start"
    wait_for 10 sh -c 'munge -n | unmunge' || fail_start "munge does not answer"
  fi
}

start_dbd() {
  mkdir -p /run/mysqld "$ROOT/mysql"
  chown mysql:mysql /run/mysqld "$ROOT/mysql"
  if [ ! -d "$ROOT/mysql/mysql" ]; then
    mariadb-install-db --user=mysql --datadir="$ROOT/mysql" --skip-test-db \
      --auth-root-authentication-method=socket >"$ROOT/log/mysql-install.log" 2>&1 \
      || fail_start "mariadb-install-db failed"
  fi
  if ! mariadb-admin ping >/dev/null 2>&1; then
    # pid file and error log must be writable by user mysql (else mariadbd crashes)
    setsid mariadbd --user=mysql --datadir="$ROOT/mysql" --socket=/run/mysqld/mysqld.sock \
      --pid-file="$ROOT/mysql/mysqld.pid" --skip-networking \
      --log-error="$ROOT/mysql/err.log" </dev/null >/dev/null 2>&1 &
    wait_for 30 mariadb-admin ping || fail_start "mariadbd does not answer"
  fi
  mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmlocal';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
  printf '%s\n' "$MARKER" AuthType=auth/munge DbdHost=localhost SlurmUser=root \
    "LogFile=$ROOT/log/slurmdbd.log" "PidFile=$ROOT/slurmdbd.pid" \
    StorageType=accounting_storage/mysql StorageHost=localhost \
    StorageLoc=slurm_acct_db StorageUser=slurm StoragePass=slurmlocal >"$ETC/slurmdbd.conf"
  chmod 600 "$ETC/slurmdbd.conf"
  alive "$ROOT/slurmdbd.pid" || slurmdbd || fail_start "slurmdbd did not start"
  wait_for 30 sacctmgr -n show cluster || fail_start "slurmdbd does not answer"
}

node_idle() { sinfo -h -N -p "$PARTITION" -o %T 2>/dev/null | grep -qx idle; }

# wait_up: the node is idle, or fail as soon as a daemon has died
wait_up() {
  local i
  for i in $(seq 300); do
    node_idle && return 0
    if [ "$i" -gt 10 ]; then
      alive "$ROOT/slurmctld.pid" || fail_start "slurmctld died during start"
      alive "$ROOT/slurmd.pid" || fail_start "slurmd died during start"
    fi
    sleep 0.2
  done
  fail_start "node localhost did not become idle within 60 s"
}

running_same_mode() {
  alive "$ROOT/slurmctld.pid" && alive "$ROOT/slurmd.pid" || return 1
  [ "$(cat "$ROOT/mode" 2>/dev/null)" = "$MODE" ] || return 1
  [ "$ACCOUNTING" = 0 ] || alive "$ROOT/slurmdbd.pid"
}

start() {
  local t0=$SECONDS
  install_packages
  if running_same_mode; then
    sinfo
    return 0
  fi
  stop_daemons
  if scontrol ping >/dev/null 2>&1; then
    die "a slurmctld that this script did not start from --root $ROOT already answers; stop it first"
  fi
  # fresh controller state: a drained/INVAL node reason survives restarts
  rm -rf "$ROOT/state" "$ROOT/spool"
  local f  # this start's logs only (the previous start's stay as *.log.prev)
  for f in "$ROOT"/log/{slurmctld,slurmd,slurmdbd}.log; do
    if [ -e "$f" ]; then mv -f "$f" "$f.prev"; fi
  done
  mkdir -p "$ROOT/munge" && chown munge:munge "$ROOT/munge"
  write_conf
  start_munge
  [ "$ACCOUNTING" = 1 ] && start_dbd
  slurmctld || fail_start "slurmctld did not start"
  # the node is called localhost whatever the hostname is
  slurmd -N localhost || fail_start "slurmd did not start"
  wait_up
  if [ "$ACCOUNTING" = 1 ]; then  # slurmctld registers cluster "kgate" itself
    sacctmgr -i add account kgate >/dev/null 2>&1 || true
    sacctmgr -i add user root account=kgate >/dev/null 2>&1 || true
  fi
  echo "$MODE" >"$ROOT/mode"
  log "up in $((SECONDS - t0)) s ($MODE, root $ROOT)"
  sinfo
}

stop_one() {
  local f=$1
  alive "$f" || return 0
  kill "$(cat "$f")" 2>/dev/null || true
  for _ in $(seq 50); do alive "$f" || return 0; sleep 0.2; done
  log "$(basename "$f" .pid) (pid $(cat "$f")) still alive after 10 s; sending SIGKILL"
  kill -9 "$(cat "$f")" 2>/dev/null || true
}

stop_daemons() {
  local f
  for f in "$ROOT/slurmd.pid" "$ROOT/slurmctld.pid" "$ROOT/slurmdbd.pid" \
           "$ROOT/mysql/mysqld.pid" "$ROOT/munge/munged.pid"; do
    stop_one "$f"
  done
}

status() {
  if ! { alive "$ROOT/slurmctld.pid" && alive "$ROOT/slurmd.pid"; }; then
    log "not running (no live slurmctld/slurmd pid files under $ROOT)"
    return 1
  fi
  echo "mode: $(cat "$ROOT/mode" 2>/dev/null || echo unknown)"
  sinfo -N -o '%N %P %T %C %m %G %f %E'
  squeue
}

case "$CMD" in
  start) start ;;
  stop) stop_daemons; rm -f "$ROOT/mode" ;;
  restart) stop_daemons; rm -f "$ROOT/mode"; start ;;
  status) status ;;
esac
