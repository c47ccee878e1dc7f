#!/usr/bin/env bash
# A private single-host Slurm cluster for the tests: one slurmctld and three slurmd daemons that
# emulate nodes n1, n2 and n3 on this host (most tests use two; test_node_loss loses the third). Everything (config, state, spool, logs, per-node TmpFS)
# lives under one temp dir; daemons talk on free loopback ports; they are stopped by PID.
#
# Source this file, then:
#   cluster_start DIR      write DIR/slurm.conf, start the daemons, wait until n1..n3 are idle;
#                          exports SLURM_CONF and the OpenMPI settings the emulated nodes need
#   cluster_stop           stop the daemons this shell started (by PID; safe to call twice)
#   cluster_ensure         reuse the cluster named by $MPITRON_SLURM_DIR (tests/e2e/slurm/run.sh
#                          starts one for all tests), else start a private one under $CLUSTER_TMP
#                          (the caller's EXIT trap runs cluster_stop; tests/e2e/slurm/lib.sh does)
#   wait_job ID SECS       wait until job ID has left the queue (any end state); 1 on timeout
#   job_state ID           the job's state now (from scontrol; "GONE" once forgotten)
#
# Auth: AuthType=auth/none + CredType=cred/none (no munged to manage); cred_expire=10 so a
# requeued job may start again ~11 s after it ended (the default makes it wait 120 s).
# Facts (Slurm 22.05, OpenMPI 4.1.4, Debian 12): SlurmdParameters=config_overrides lets the
# nodes advertise more CPUs than the 2 real cores; TmpFS=<dir>/tmp/%n keeps the PMIx temp dirs of
# the two "nodes" apart; OMPI_MCA_btl=self,tcp because the shared-memory BTL crashes when two
# "nodes" share a hostname.

CLUSTER_PIDS=()

_free_port() {  # a TCP port nobody listens on (checked by binding it on loopback)
  /usr/bin/python3 - "$@" <<'PY'
import random, socket, sys
taken = set(int(p) for p in sys.argv[1:])
for _ in range(200):
    p = random.randint(20000, 45000)
    if p in taken:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
else:
    sys.exit("no free port")
PY
}

cluster_start() {
  local dir=$1 host p0 p1 p2 p3
  host=$(hostname -s)
  for b in slurmctld slurmd sbatch srun scontrol squeue; do
    command -v "$b" >/dev/null || { echo "cluster: $b not found (make deps-slurm installs it)" >&2; return 1; }
  done
  mkdir -p "$dir"/{state,log,spool/n1,spool/n2,spool/n3,tmp/n1,tmp/n2,tmp/n3,etc}
  dir=$(cd "$dir" && pwd)
  p0=$(_free_port) && p1=$(_free_port "$p0") && p2=$(_free_port "$p0" "$p1") && p3=$(_free_port "$p0" "$p1" "$p2") ||
    return 1
  cat >"$dir/etc/slurm.conf" <<CONF
# private test cluster (tests/e2e/slurm/cluster.sh); three slurmd on host $host
ClusterName=mpitrontest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$p0
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
AuthType=auth/none
CredType=cred/none
AuthInfo=cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=$dir/tmp/%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
MailProg=/bin/true
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
PlugStackConfig=$dir/etc/plugstack.conf
JobRequeue=1
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=300
SchedulerParameters=sched_interval=2
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$p1 CPUs=4 RealMemory=2000 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$p2 CPUs=4 RealMemory=2000 State=UNKNOWN
NodeName=n3 NodeHostname=$host NodeAddr=127.0.0.1 Port=$p3 CPUs=4 RealMemory=2000 State=UNKNOWN
PartitionName=test Nodes=n1,n2,n3 Default=YES MaxTime=30 State=UP
CONF
  : >"$dir/etc/plugstack.conf"
  export SLURM_CONF=$dir/etc/slurm.conf MPITRON_SLURM_DIR=$dir
  # What the emulated nodes need from OpenMPI; loopback only.
  export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
  export OMP_NUM_THREADS=1

  slurmctld -D -i -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 &
  CLUSTER_PIDS+=($!)
  echo "$!" >"$dir/pids"
  local n
  for n in n1 n2 n3; do
    slurmd -D -N "$n" -f "$SLURM_CONF" >"$dir/log/slurmd.$n.out" 2>&1 &
    CLUSTER_PIDS+=($!)
    echo "$!" >>"$dir/pids"
  done
  local t
  for t in $(seq 1 60); do
    if [ "$(sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle')" = 3 ]; then
      echo "cluster: up in ${t}s at $dir (slurmctld :$p0, n1 :$p1, n2 :$p2, n3 :$p3; pids ${CLUSTER_PIDS[*]})"
      return 0
    fi
    for p in "${CLUSTER_PIDS[@]}"; do
      kill -0 "$p" 2>/dev/null || { echo "cluster: daemon $p died" >&2; tail -n 20 "$dir"/log/*.out "$dir"/log/*.log >&2; return 1; }
    done
    sleep 1
  done
  echo "cluster: nodes not idle after 60 s" >&2
  sinfo -N >&2 || true
  tail -n 20 "$dir"/log/*.log >&2
  return 1
}

cluster_stop() {
  [ ${#CLUSTER_PIDS[@]} -gt 0 ] || return 0
  local p t alive
  # Jobs first: slurmd ends their steps (slurmstepd would outlive a stopped slurmd).
  if [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then
    scancel --full $(squeue -h -o %i) 2>/dev/null || true
    for t in $(seq 1 30); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  for p in "${CLUSTER_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for t in $(seq 1 20); do
    alive=0
    for p in "${CLUSTER_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.5
  done
  for p in "${CLUSTER_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait "${CLUSTER_PIDS[@]}" 2>/dev/null || true
  CLUSTER_PIDS=()
}

cluster_ensure() {
  if [ -n "${MPITRON_SLURM_DIR:-}" ] && [ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ]; then
    return 0
  fi
  CLUSTER_TMP=$(mktemp -d /tmp/mpitron-slurm.XXXXXX)
  cluster_start "$CLUSTER_TMP/cluster"
}

job_state() {
  local s
  s=$(scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n 1)
  echo "${s:-GONE}"
}

wait_job() {  # id seconds
  local id=$1 limit=$2 t s
  for t in $(seq 1 "$limit"); do
    s=$(job_state "$id")
    case $s in
      PENDING | RUNNING | CONFIGURING | COMPLETING | REQUEUED | REQUEUE_HOLD | REQUEUE_FED | SUSPENDED | RESIZING | SIGNALING | STAGE_OUT) ;;
      *) return 0 ;;
    esac
    sleep 1
  done
  echo "job $id still $s after $limit s" >&2
  return 1
}
