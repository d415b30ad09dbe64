#!/usr/bin/env bash
# Make sure a Docker engine answers, for the kind e2e. Prints nothing but progress on stderr.
#   e2e/kind/docker-engine.sh          # exit 0: `docker info` answers; exit 3: none can be started
# On a host without one (root, apt, no systemd as PID 1, e.g. a CI VM) it installs Debian's
# `docker.io` and starts `dockerd` itself (log: /var/log/tpfabric-dockerd.log). Host quirks are
# handled only when detected:
#  - root's capability bounding set lacks capabilities that Docker grants `--privileged`
#    containers (runc then fails with "unable to apply caps"): a runc wrapper that drops the
#    capabilities the host cannot grant becomes Docker's default runtime.
# An engine that already answers is used as it is.
set -euo pipefail

log() { printf 'docker-engine: %s\n' "$*" >&2; }
unavailable() { log "$*"; exit 3; }

DOCKER=${DOCKER:-docker}
WRAPPER_DIR=/usr/local/libexec/tpfabric
WRAPPER=$WRAPPER_DIR/runc-capbnd
DAEMON_LOG=/var/log/tpfabric-dockerd.log

answers() { command -v "$DOCKER" >/dev/null 2>&1 && timeout 20 "$DOCKER" info >/dev/null 2>&1; }

# Bits of root's capability bounding set that Docker's default (full) set needs but the host lacks.
capbnd_short() {
  local bnd
  bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
  # Every capability up to CAP_CHECKPOINT_RESTORE (40) is one Docker 20.10+ grants --privileged.
  (( (0x$bnd & 0x1ffffffffff) != 0x1ffffffffff ))
}

install_runc_wrapper() {
  local real_runc=$1
  mkdir -p "$WRAPPER_DIR"
  cat >"$WRAPPER.new" <<EOF
#!/usr/bin/python3
# Installed by tpfabric's e2e/kind/docker-engine.sh: this host's capability bounding set lacks
# capabilities Docker grants --privileged containers. Drop those from the OCI spec (create/run)
# or process file (exec), then run the real runc.
import json, os, sys

REAL = "$real_runc"
NAMES = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
         "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
         "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
         "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
         "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
         "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
         "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
         "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
         "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE"]


def allowed():
    with open("/proc/self/status") as status:
        bnd = next(int(l.split()[1], 16) for l in status if l.startswith("CapBnd:"))
    return {name for bit, name in enumerate(NAMES) if bnd >> bit & 1}


def clean(process, keep):
    caps = process.get("capabilities") or {}
    for kind, names in caps.items():
        caps[kind] = [n for n in names if n in keep or n not in NAMES]


def edit(path, process_only):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return
    keep = allowed()
    clean(doc if process_only else doc.get("process", {}), keep)
    with open(path, "w") as f:
        json.dump(doc, f)


args = sys.argv[1:]
# Global flags (--root DIR, --log FILE, ...) come first: the command is the first known word.
command = next((a for a in args if a in ("create", "run", "exec")), "")


def value(flag):
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None

if command in ("create", "run"):
    edit(os.path.join(value("--bundle") or value("-b") or ".", "config.json"), False)
elif command == "exec" and value("--process"):
    edit(value("--process"), True)
os.execv(REAL, [REAL, *args])
EOF
  chmod 755 "$WRAPPER.new"
  if cmp -s "$WRAPPER.new" "$WRAPPER"; then rm -f "$WRAPPER.new"; else mv "$WRAPPER.new" "$WRAPPER"; fi
}

# configure_daemon: the runc wrapper as Docker's default runtime, only where the host needs it.
# Returns 0 when daemon.json changed (a running dockerd must reload it).
configure_daemon() {
  local real_runc
  capbnd_short || return 1
  real_runc=$(command -v runc || true)
  [[ -n $real_runc ]] || unavailable "runc not found (Debian's docker.io brings it)"
  install_runc_wrapper "$real_runc"
  grep -q '"tpfabric-runc"' /etc/docker/daemon.json 2>/dev/null && return 1
  log "quirk: the capability bounding set lacks capabilities Docker grants --privileged; default runtime: $WRAPPER"
  mkdir -p /etc/docker
  local existing='{}'
  [[ -s /etc/docker/daemon.json ]] && existing=$(cat /etc/docker/daemon.json)
  jq --arg w "$WRAPPER" '.runtimes["tpfabric-runc"] = {path: $w} | ."default-runtime" = "tpfabric-runc"' \
    <<<"$existing" >/etc/docker/daemon.json.new
  mv /etc/docker/daemon.json.new /etc/docker/daemon.json
}

if answers; then
  # A running engine on a host that needs the wrapper gets it too when it is ours to configure
  # (root, a local dockerd): SIGHUP reloads daemon.json.
  if [[ $(id -u) == 0 ]] && pgrep -x dockerd >/dev/null && configure_daemon; then
    kill -HUP "$(pgrep -x dockerd | head -n1)"
    sleep 2
  fi
  exit 0
fi

[[ $(id -u) == 0 ]] || unavailable "no Docker engine answers and this is not root: cannot install or start one"

if ! command -v dockerd >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || unavailable "no Docker engine and no apt-get to install Debian's docker.io"
  log "installing Debian's docker.io (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 || unavailable "apt-get update failed"
  apt-get install -y -qq --no-install-recommends docker.io iptables >&2 \
    || unavailable "apt-get install docker.io failed"
fi
command -v "$DOCKER" >/dev/null 2>&1 || DOCKER=docker

configure_daemon || true
if ! pgrep -x dockerd >/dev/null; then
  log "starting dockerd (log: $DAEMON_LOG)"
  # A systemd host starts it through its unit; elsewhere (containers, CI VMs) directly.
  if [[ $(ps -p 1 -o comm= 2>/dev/null) == systemd ]] && systemctl start docker 2>/dev/null; then
    :
  else
    setsid nohup dockerd >>"$DAEMON_LOG" 2>&1 </dev/null &
    disown
  fi
fi
for _ in $(seq 60); do
  answers && exit 0
  sleep 1
done
unavailable "dockerd did not answer within 60 s; its log ends with: $(tail -n 5 "$DAEMON_LOG" 2>/dev/null)"
