#!/usr/bin/env bash
# tools/offline.sh CMD [ARG...]: run CMD with no network (issue 8: the suite passes offline).
#
# CMD runs in a new network namespace whose only interface is the loopback, brought up
# (with 127.0.0.2 beside 127.0.0.1, for getaddrinfo's AI_ADDRCONFIG: see stage 2 below):
# notebook kernels (ZMQ), torchrun's rendezvous and gloo all talk over 127.0.0.1, while a
# connect to any other address fails at once with ENETUNREACH. As root: unshare -n. Otherwise
# a user namespace too (unshare -rn, then CMD runs under the caller's uid again), or sudo.
# Where none is permitted it falls back, LOUDLY, to a guard in every Python process
# (tools/offline_net.py, loaded by a sitecustomize.py put first on PYTHONPATH): Python's
# connects and name lookups beyond the loopback raise; programs that are not Python are not
# cut off.
#
#   LABKIT_OFFLINE_MODE=auto|namespace|guard  namespace: exit 3 rather than fall back
#   LABKIT_OFFLINE_LO=ip|python               bring lo up with `ip`, or with an ioctl (no iproute2)
# CMD sees LABKIT_OFFLINE_METHOD=namespace or guard, and GLOO_SOCKET_IFNAME=lo.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
self="$here/offline.sh"
py="${OFFLINE_PYTHON:-python3}"
say() { echo "offline.sh: $*" >&2; }

if [ "${1-}" = "--labkit-offline-stage2" ]; then  # inside the new namespace
  shift
  if [ "${LABKIT_OFFLINE_LO:-ip}" = ip ] && command -v ip >/dev/null; then
    ip link set lo up
    # A second loopback address: getaddrinfo(3) with AI_ADDRCONFIG returns no IPv4 address when
    # the loopback address is the only one ("the loopback address is not considered ... as a
    # configured address"), and Slurm's daemons and clients look up with it (tests/test_slurm.py).
    ip addr add 127.0.0.2/8 dev lo 2>/dev/null || true
  else
    "$py" "$here/offline_net.py" lo-up
  fi
  drop="${LABKIT_OFFLINE_DROP-}"
  unset LABKIT_OFFLINE_DROP
  IFS=: read -r how uid gid <<<"${drop:-none::}"
  case "$how" in  # back to the caller's own uid
    userns) exec unshare --map-user="$uid" --map-group="$gid" -- "$@" ;;
    setpriv) exec setpriv --reuid="$uid" --regid="$gid" --init-groups -- "$@" ;;
    *) exec "$@" ;;
  esac
fi

[ $# -gt 0 ] || { echo "usage: tools/offline.sh CMD [ARG...]" >&2; exit 2; }
mode="${LABKIT_OFFLINE_MODE:-auto}"
case "$mode" in
  auto | namespace | guard) ;;
  *) say "LABKIT_OFFLINE_MODE must be auto, namespace or guard, got '$mode'"; exit 2 ;;
esac
export GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-lo}"  # the only interface there is

if [ "$mode" != guard ]; then
  export LABKIT_OFFLINE_METHOD=namespace
  uid="$(id -u)" gid="$(id -g)"
  if why_n="$(unshare -n true 2>&1)"; then
    exec unshare -n -- bash "$self" --labkit-offline-stage2 "$@"
  fi
  if why_rn="$(unshare -rn true 2>&1)"; then
    drop=""
    if unshare -rn unshare --map-user="$uid" --map-group="$gid" true 2>/dev/null; then
      drop="userns:$uid:$gid"
    else
      say "note: CMD runs as root of a user namespace (this unshare cannot map uid $uid back)"
    fi
    LABKIT_OFFLINE_DROP="$drop" exec unshare -rn -- bash "$self" --labkit-offline-stage2 "$@"
  fi
  if [ "$uid" -ne 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    exec sudo -n --preserve-env env PATH="$PATH" HOME="$HOME" \
      LABKIT_OFFLINE_DROP="setpriv:$uid:$gid" unshare -n -- bash "$self" --labkit-offline-stage2 "$@"
  fi
  why="unshare -n: ${why_n:-failed}; unshare -rn: ${why_rn:-failed}; no passwordless sudo"
  if [ "$mode" = namespace ]; then
    say "cannot make a network namespace here ($why)"
    exit 3
  fi
  say "WARNING: cannot make a network namespace here ($why)."
  say "WARNING: falling back to a guard in each Python process: Python's connects and name"
  say "WARNING: lookups beyond the loopback raise; C libraries and other programs are NOT cut off."
fi

export LABKIT_OFFLINE_METHOD=guard
site="$(mktemp -d "${TMPDIR:-/tmp}/labkit-offline.XXXXXX")"
trap 'rm -rf "$site"' EXIT
"$py" "$here/offline_net.py" write-site "$site"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
"$@"  # not exec: the trap removes the folder; set -e passes CMD's exit status on
