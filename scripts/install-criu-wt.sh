#!/usr/bin/env bash
# `make deps-incremental`: a CRIU for `mpicr run --incremental` on kernels without soft-dirty
# bits (CONFIG_MEM_SOFT_DIRTY unset), into .deps/criu-wt/criu. It is CRIU 4.1.1 (the version of
# .deps/criu, so that images agree) built from Debian trixie's source with
# scripts/criu-patches/uffd-wp-tracking.patch: given CRIU_UFFD_WP=PID:FD (a userfaultfd of PID in
# asynchronous write-protect mode, which the keeper gets from mpicr's agent), `--track-mem` takes
# "written since the last dump" from PAGEMAP_SCAN (Linux 6.7+) where it would read soft-dirty bits,
# and write-protects the dumped pages again after each dump. Only --incremental uses it; every
# other dump and every restore runs .deps/criu/criu. See docs/incremental.md.
#
# Needs root (apt: a deb-src line for trixie and bookworm's -dev packages; setcap). Build time:
# about 1.5 minutes on 2 busy cores. Idempotent: nothing happens when the binary is there, runs,
# was built from this patch and has its capabilities.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$PWD/.deps/criu-wt
bin=$dest/criu
patch_file=$PWD/scripts/criu-patches/uffd-wp-tracking.patch
version=4.1.1
want=$(sha256sum "$patch_file" | cut -d' ' -f1)

. scripts/criu-caps.sh
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1 && [ "$(cat "$dest/patch.sha256" 2>/dev/null)" = "$want" ] \
    && criu_has_caps "$bin"; then
    exit 0
fi
echo "deps: CRIU $version with write tracking (userfaultfd) into .deps/criu-wt"

src=/etc/apt/sources.list.d/mpicr-trixie-src.sources
if [ ! -f "$src" ]; then
    mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=$(awk '$1=="deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    [ -n "$mirror" ] || { echo "deps: cannot find the Debian mirror in apt's sources" >&2; exit 1; }
    cat > "$src" <<SRC
Types: deb-src
URIs: $mirror
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -qq
fi
# CRIU's build dependencies, from the machine's own release (the binary links its libc).
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends build-essential pkg-config \
    libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev protobuf-compiler python3-protobuf \
    libnl-3-dev libnet1-dev libcap-dev libaio-dev libbsd-dev libgnutls28-dev >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# Only the upstream tarball is needed (some mirrors lack the .dsc: apt then fails after it).
apt-get source --download-only -qq "criu/trixie" >/dev/null 2>&1 || true
tarball=$(ls criu_"$version".orig.tar.* 2>/dev/null | head -1 || true)
[ -n "$tarball" ] || { echo "deps: could not download the source of CRIU $version (criu/trixie)" >&2; exit 1; }
tar xf "$tarball"
cd "criu-$version"
patch -p1 -s < "$patch_file"
make -s -j"$(nproc)" criu >build.log 2>&1 || { tail -20 build.log >&2; echo "deps: building CRIU failed" >&2; exit 1; }
mkdir -p "$dest"
install -m 0755 criu/criu "$dest/.criu.$$"
mv -f "$dest/.criu.$$" "$bin"
echo "$want" > "$dest/patch.sha256"
"$bin" --version
criu_grant "$bin" .deps/criu-wt/criu "deps: "
