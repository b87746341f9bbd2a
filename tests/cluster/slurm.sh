#!/usr/bin/env bash
# A one-node SLURM cluster on this machine for `make test-cluster`, from Debian's packages
# (slurmctld, slurmd, slurmdbd, munge, mariadb-server; `start` installs them with apt-get when
# they are missing; see tests/cluster/README.md).
#
#   tests/cluster/slurm.sh start    start munged, mariadb, slurmdbd, slurmctld, slurmd (idempotent)
#   tests/cluster/slurm.sh stop     stop them all again (idempotent; nothing is left running)
#   tests/cluster/slurm.sh status   what runs, and sinfo
#
# The node has two partitions: `cpu` (default) and `gpu`; it declares one `gpu` generic
# resource without a device file, so `--gpus=1` / `--gres=gpu:1` jobs are accepted and scheduled
# (there is no real GPU: the job sees none and vocabtransfer's `--device auto` uses the CPU).
# Accounting goes to slurmdbd (MariaDB), so `sacct` reports every job.
# Must run as root. State lives in $SLURM_TEST_DIR (default /var/tmp/vocabtransfer-slurm).
set -euo pipefail

STATE=${SLURM_TEST_DIR:-/var/tmp/vocabtransfer-slurm}
HOST=$(hostname -s)
CPUS=${SLURM_TEST_CPUS:-$(nproc --all)}  # --all: OMP_NUM_THREADS does not count
MEM_MB=${SLURM_TEST_MEM_MB:-$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) * 3 / 4 ))}
CLUSTER=vtcluster
ACCOUNT=vtest
ETC=/etc/slurm

log() { echo "slurm.sh: $*" >&2; }

# pid of a daemon from its pid file, if it is alive
alive() { local f=$STATE/run/$1.pid; [[ -s $f ]] && kill -0 "$(cat "$f")" 2>/dev/null; }

wait_for() {  # wait_for <what> <command…>: up to 60 s
  local what=$1; shift
  for _ in $(seq 1 120); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  log "$what did not come up; logs in $STATE/log"; tail -n 20 "$STATE"/log/* >&2 || true; return 1
}

write_config() {
  mkdir -p "$STATE"/{run,log,spool/ctld,spool/d,mysql,dev} "$ETC"
  touch "$STATE/dev/gpu0"
  chown -R slurm:slurm "$STATE/spool"
  # pid files and logs of daemons running as slurm, munge and mysql
  chmod 1777 "$STATE/run" "$STATE/log"
  cat > "$ETC/slurm.conf.new" <<EOF
# written by tests/cluster/slurm.sh (test cluster for vocabtransfer)
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
ReturnToService=2
MpiDefault=none
SchedulerType=sched/backfill
# jobs that ask for no memory get 1 GB per CPU, not the whole node
DefMemPerCPU=1000
# finished jobs stay visible to squeue/scontrol for 5 minutes
MinJobAge=300
KillWait=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStorageTRES=gres/gpu
# sacct shows the comment (rule and wildcards) that snakemake gives every job
AccountingStoreFlags=job_comment
AccountingStorageEnforce=associations
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:1 State=UNKNOWN
PartitionName=cpu Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$HOST MaxTime=INFINITE State=UP
EOF
  cat > "$ETC/gres.conf.new" <<EOF
# one GPU whose device is a plain file: schedulable, not real
AutoDetect=off
NodeName=$HOST Name=gpu File=$STATE/dev/gpu0
EOF
  cat > "$ETC/slurmdbd.conf.new" <<EOF
AuthType=auth/munge
DbdHost=$HOST
DbdAddr=127.0.0.1
SlurmUser=slurm
PidFile=$STATE/run/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3307
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$ETC/slurmdbd.conf.new"
  for f in slurm.conf gres.conf slurmdbd.conf; do mv "$ETC/$f.new" "$ETC/$f"; done
  chown slurm:slurm "$ETC/slurmdbd.conf"
  cat > "$STATE/my.cnf" <<EOF
[mysqld]
datadir=$STATE/mysql
socket=$STATE/run/mysqld.sock
pid-file=$STATE/run/mariadb.pid
port=3307
bind-address=127.0.0.1
log-error=$STATE/log/mariadb.log
innodb_buffer_pool_size=512M
innodb_lock_wait_timeout=900
EOF
}

sql() { mariadb --socket="$STATE/run/mysqld.sock" -u root "$@"; }

PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server)
install_packages() {  # Debian's packages, once: only when a program this script runs is missing
  local missing=() prog
  for prog in /usr/sbin/{slurmctld,slurmd,slurmdbd,munged,mungekey,mariadbd,mariadb-install-db} /usr/bin/{sacct,sacctmgr,sinfo,mariadb}; do
    [[ -x $prog ]] || missing+=("${prog##*/}")
  done
  (( ${#missing[@]} )) || return 0
  log "installing ${PACKAGES[*]} (missing: ${missing[*]})"
  # no package may start its service from its postinst: start() starts every daemon itself
  local policy=/usr/sbin/policy-rc.d added=""
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 0755 "$policy" && added=1
  fi
  local status=0
  { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}"; } || status=$?
  [[ -z $added ]] || rm -f "$policy"
  (( status == 0 )) || { log "apt-get install ${PACKAGES[*]} failed (exit $status)"; exit 1; }
}

start() {
  [[ $(id -u) == 0 ]] || { log "must run as root"; exit 1; }
  install_packages
  write_config

  if ! alive munged; then
    install -d -o munge -g munge -m 0755 /run/munge
    [[ -s /etc/munge/munge.key ]] || runuser -u munge -- mungekey --create
    runuser -u munge -- /usr/sbin/munged --pid-file="$STATE/run/munged.pid.tmp"
    # munged writes its own pid file as user munge; keep a copy ours can read
    wait_for munged test -s "$STATE/run/munged.pid.tmp"
    cp "$STATE/run/munged.pid.tmp" "$STATE/run/munged.pid"
    log "munged started"
  fi

  if ! alive mariadb; then
    if [[ ! -d $STATE/mysql/mysql ]]; then
      chown mysql:mysql "$STATE/mysql"
      mariadb-install-db --defaults-file="$STATE/my.cnf" --user=mysql --auth-root-authentication-method=socket \
        > "$STATE/log/mariadb-install.log" 2>&1
    fi
    (setsid /usr/sbin/mariadbd --defaults-file="$STATE/my.cnf" --user=mysql > /dev/null 2>&1 &)
    wait_for mariadb sql -e "select 1"
    sql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
            CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
            CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
    log "mariadb started"
  fi

  if ! alive slurmdbd; then
    /usr/sbin/slurmdbd
    wait_for slurmdbd sacctmgr -n list cluster
    log "slurmdbd started"
  fi
  # the cluster, an account and root as its user (idempotent)
  sacctmgr -i -Q add cluster "$CLUSTER" >/dev/null 2>&1 || true
  sacctmgr -i -Q add account "$ACCOUNT" Cluster="$CLUSTER" Description="vocabtransfer tests" >/dev/null 2>&1 || true
  for user in root "${SUDO_USER:-root}"; do
    sacctmgr -i -Q add user "$user" Account="$ACCOUNT" Cluster="$CLUSTER" >/dev/null 2>&1 || true
  done

  if ! alive slurmctld; then
    /usr/sbin/slurmctld
    wait_for slurmctld scontrol ping
    log "slurmctld started"
  fi
  if ! alive slurmd; then
    /usr/sbin/slurmd
    log "slurmd started"
  fi
  # the node comes up idle (or is resumed after a crash)
  wait_for "node $HOST" bash -c "sinfo -h -n $HOST -o %t | grep -qE '^(idle|mix|alloc)'" || {
    scontrol update NodeName="$HOST" State=RESUME || true
    wait_for "node $HOST" bash -c "sinfo -h -n $HOST -o %t | grep -qE '^(idle|mix|alloc)'"
  }
  sinfo
}

stop_one() {  # stop_one <name>: SIGTERM, wait up to 30 s, then SIGKILL
  local name=$1 pid
  alive "$name" || { rm -f "$STATE/run/$name.pid"; return 0; }
  pid=$(cat "$STATE/run/$name.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then log "$name did not stop; killing it"; kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$STATE/run/$name.pid"
  log "$name stopped"
}

stop() {
  # jobs first, so that no slurmstepd outlives slurmd
  if alive slurmctld; then scancel --full --quiet --user=root 2>/dev/null || true; sleep 1; fi
  stop_one slurmd
  stop_one slurmctld
  stop_one slurmdbd
  stop_one mariadb
  stop_one munged
  rm -f "$STATE/run/munged.pid.tmp"
}

status() {
  for d in munged mariadb slurmdbd slurmctld slurmd; do
    if alive $d; then echo "$d: running (pid $(cat "$STATE/run/$d.pid"))"; else echo "$d: stopped"; fi
  done
  alive slurmctld && sinfo || true
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
