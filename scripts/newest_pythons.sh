#!/usr/bin/env bash
# CPython 3.14 and 3.15 for a Linux x86_64 machine that lacks them: Debian's own builds, from its `sid`
# suite, in a Debian sid root made with debootstrap (they need a newer glibc than today's stable
# distributions have, so they cannot be installed beside the host's own Python). Needs root and Debian's
# package archive; PyPI is reached from inside the root, as on the host.
#
#   scripts/newest_pythons.sh make                      # make the root, or reuse the one made before
#   scripts/newest_pythons.sh run python3.14 -- CMD...  # run CMD in it, in this folder, PYTHON=python3.14
#   scripts/newest_pythons.sh path                      # print where the root is
#
# scripts/test.sh calls `run` itself when PYTHON names an interpreter the host lacks and the root has:
# `PYTHON=python3.14 scripts/test.sh` works on any such machine. Inside the root the repository's parent
# folder is mounted at its own path, so the checkout, its .venv-3.14 and ../shared beside it are where they
# are on the host; the virtual environments made inside work only inside.
#
# The root is kept outside the checkout, for every clone and CI run on the machine:
#   ORT_CFFI_SID_ROOT      where (default /var/cache/ort_cffi/sid-root; about 450 MB)
#   ORT_CFFI_DEBIAN_MIRROR the archive (default http://deb.debian.org/debian)
# A marker file inside says it was finished, with what: a root without it (an interrupted make) or made
# with other packages is made again. A lock beside it keeps two makes apart, and a make from a run.
set -euo pipefail

ROOT_DIR=${ORT_CFFI_SID_ROOT:-/var/cache/ort_cffi/sid-root}
MIRROR=${ORT_CFFI_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3.14-venv,python3.15-venv,ca-certificates  # ca-certificates: pip's HTTPS to PyPI
MARKER=$ROOT_DIR/.ort_cffi-root-complete
LOCK=$ROOT_DIR.lock

die() { echo "newest_pythons.sh: $*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
  exit 2
}

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and bind mounts); run it as root or with sudo"
  [ "$(uname -m)" = x86_64 ] || die "made for Linux x86_64 (this is $(uname -m))"
}

# Anything mounted at or under $1 (a root is only ever removed when nothing is: a bind-mounted folder
# of the host would go with it).
mounted_under() {
  awk -v root="$1" '$5 == root || index($5, root "/") == 1 { print $5 }' /proc/self/mountinfo
}

root_is_complete() {
  [ -f "$MARKER" ] && [ "$(head -n1 "$MARKER")" = "$PACKAGES" ] \
    && [ -x "$ROOT_DIR/usr/bin/python3.14" ] && [ -x "$ROOT_DIR/usr/bin/python3.15" ]
}

make_root() {  # with the lock held exclusively
  root_is_complete && return 0
  if ! command -v debootstrap >/dev/null; then
    command -v apt-get >/dev/null || die "debootstrap is missing, and there is no apt-get to install it"
    echo "=== installing debootstrap ===" >&2
    apt-get install -y -q debootstrap >&2 || die "could not install debootstrap (apt-get install debootstrap)"
  fi
  if ! wget -q -T 30 -t 2 -O /dev/null "$MIRROR/dists/sid/Release"; then
    die "cannot reach Debian's archive at $MIRROR (no network?): $MIRROR/dists/sid/Release did not download"
  fi
  if [ -e "$ROOT_DIR" ]; then
    local busy
    busy=$(mounted_under "$ROOT_DIR")
    [ -z "$busy" ] || die "$ROOT_DIR is unfinished or out of date, but has mounts inside it: $busy (unmount them first)"
    echo "=== $ROOT_DIR is unfinished or was made with other packages: making it again ===" >&2
    rm -rf --one-file-system "$ROOT_DIR"
  fi
  mkdir -p "$(dirname "$ROOT_DIR")"
  echo "=== making a Debian sid root with $PACKAGES in $ROOT_DIR (a few minutes, once) ===" >&2
  local started=$SECONDS
  debootstrap --variant=minbase --include="$PACKAGES" sid "$ROOT_DIR" "$MIRROR" >&2 \
    || die "debootstrap failed (see above; its log is $ROOT_DIR/debootstrap/debootstrap.log)"
  # apt inside, for whoever adds packages (`chroot ROOT apt-get update`): the sid Release file as served
  # here is past its Valid-Until date, so apt is told not to check it (-o Acquire::Check-Valid-Until=false,
  # kept in its configuration); debootstrap itself does not check it.
  echo 'Acquire::Check-Valid-Until "false";' >"$ROOT_DIR/etc/apt/apt.conf.d/99ort-cffi-valid-until"
  "$ROOT_DIR/usr/bin/python3.14" -c "" 2>/dev/null || chroot "$ROOT_DIR" python3.14 -c "" \
    || die "python3.14 does not run in the new root"
  { echo "$PACKAGES"; echo "made $(date -u +%FT%TZ) from $MIRROR in $((SECONDS - started)) s"; } >"$MARKER"
  echo "=== made in $((SECONDS - started)) s: $(chroot "$ROOT_DIR" python3.14 -V), $(chroot "$ROOT_DIR" python3.15 -V) ===" >&2
}

LOCK_FD=
lock() {  # lock shared|exclusive: one open lock file per run, so that `make` then `run` converts its lock
  if [ -z "$LOCK_FD" ]; then
    mkdir -p "$(dirname "$LOCK")"
    exec {LOCK_FD}>>"$LOCK"
  fi
  if ! flock --nonblock "--$1" "$LOCK_FD"; then
    echo "=== waiting for another run of newest_pythons.sh ($LOCK) ===" >&2
    flock "--$1" "$LOCK_FD"
  fi
}

# The part of `run` inside a private mount namespace (where unshare can make one): what it mounts is
# seen by this run only, and goes when it ends; the trap unmounts it in either case.
MOUNTED=()
unmount_all() {
  local i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTED[i]}" 2>/dev/null || umount -l "${MOUNTED[i]}" 2>/dev/null || true
  done
  MOUNTED=()
}

bind() {  # bind SOURCE TARGET_INSIDE_ROOT
  mkdir -p "$ROOT_DIR$2"
  mount --bind "$1" "$ROOT_DIR$2"
  MOUNTED+=("$ROOT_DIR$2")
}

enter() {  # enter PYTHON WORKDIR COMMAND...
  local python=$1 workdir=$2; shift 2
  local shared_dir
  shared_dir=$(dirname "$workdir")
  # The host's view of the network and its CA bundle (pip reaches PyPI from inside as from outside).
  cp -L /etc/resolv.conf "$ROOT_DIR/etc/resolv.conf"
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp -L /etc/ssl/certs/ca-certificates.crt "$ROOT_DIR/etc/ssl/certs/ca-certificates.crt"
  fi
  trap unmount_all EXIT
  bind /proc /proc
  bind /sys /sys
  bind /dev /dev
  [ -d /dev/pts ] && bind /dev/pts /dev/pts
  [ -d /dev/shm ] && bind /dev/shm /dev/shm  # multiprocessing's semaphores
  bind "$shared_dir" "$shared_dir"
  # ONNX Runtime's Java test data, where it is not beside the checkout once symlinks are resolved (../shared
  # may be a link to elsewhere); its variable is passed on.
  local java_data=${ORT_CFFI_JAVA_TESTDATA:-}
  if [ -n "$java_data" ] && [ -d "$java_data" ]; then
    java_data=$(cd "$java_data" && pwd -P)
    if [ "${java_data#"$(cd "$shared_dir" && pwd -P)"/}" = "$java_data" ]; then
      bind "$java_data" "$java_data"
    fi
  fi
  local passed=()
  mapfile -t passed < <(env_to_pass)
  local status=0
  chroot "$ROOT_DIR" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 TERM="${TERM:-dumb}" \
    ORT_CFFI_IN_SID_ROOT=1 PYTHON="$python" "${passed[@]}" \
    /bin/bash -c 'cd "$0" && exec "$@"' "$workdir" "$@" || status=$?
  unmount_all
  trap - EXIT
  return "$status"
}

# The variables a test run is steered by (CI's requirements, the Java data), passed on into the root.
env_to_pass() {
  local name
  for name in $(compgen -e); do
    case $name in
      ORT_CFFI_SID_ROOT|ORT_CFFI_DEBIAN_MIRROR|ORT_CFFI_SID_NAMESPACE|ORT_CFFI_IN_SID_ROOT) ;;
      ORT_CFFI_*|PYTEST_*|PIP_INDEX_URL|PIP_EXTRA_INDEX_URL|CI) printf '%s=%s\n' "$name" "${!name}" ;;
    esac
  done
}

run_inside() {  # run_inside PYTHON COMMAND... (the root made, the lock held shared)
  local python=$1; shift
  local workdir
  workdir=$(pwd -P)
  [ "$workdir" != / ] && [ "$(dirname "$workdir")" != / ] || die "run it from a folder below a parent folder other than /"
  if [ -z "${ORT_CFFI_SID_NAMESPACE:-}" ] && unshare --mount --propagation private true 2>/dev/null; then
    ORT_CFFI_SID_NAMESPACE=1 exec unshare --mount --propagation private -- bash "$0" run "$python" -- "$@"
  fi
  enter "$python" "$workdir" "$@"
}

[ $# -ge 1 ] || usage
case $1 in
  make)
    need_root
    lock exclusive
    make_root
    echo "$ROOT_DIR"
    ;;
  path)
    echo "$ROOT_DIR"
    ;;
  run)
    [ $# -ge 4 ] && [ "$3" = -- ] || usage
    python=$2; shift 3
    need_root
    case $python in python3.14|python3.15) ;; *) die "the root has python3.14 and python3.15, not $python" ;; esac
    lock shared  # runs share the root; no make removes it under one
    if [ -z "${ORT_CFFI_SID_NAMESPACE:-}" ] && ! root_is_complete; then  # (a re-entered run found it made)
      flock --unlock "$LOCK_FD"
      lock exclusive
      make_root
      lock shared
    fi
    run_inside "$python" "$@"
    ;;
  *) usage ;;
esac
