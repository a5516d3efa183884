#!/usr/bin/env bash
# Debian 12's CRIU 3.17 fails on kernels >= 6.x ("Unexpected rt vDSO area bounds"). Debian 13's
# CRIU 4.1 works but needs glibc 2.38, so its packages (and the libraries it links) are unpacked
# into .deps/criu/root and run through that tree's own dynamic loader by .deps/criu/criu.
# The trixie suite is added to apt with pin priority 100, so nothing else is ever upgraded from it.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$PWD/.deps/criu
wrapper=$dest/criu
if [ -x "$wrapper" ] && "$wrapper" --version >/dev/null 2>&1; then exit 0; fi
echo "deps: private CRIU 4.1 into .deps/criu"

src=/etc/apt/sources.list.d/mpicr-trixie.sources
if [ ! -f "$src" ]; then
    # Reuse the mirror this machine already uses for Debian, with the trixie suite.
    mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=$(awk '$1=="deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    [ -n "$mirror" ] || { echo "deps: cannot find the Debian mirror in apt's sources" >&2; exit 1; }
    cat > "$src" <<SRC
Types: deb
URIs: $mirror
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    cat > /etc/apt/preferences.d/mpicr-trixie <<PIN
Package: *
Pin: release n=trixie
Pin-Priority: 100
PIN
    apt-get update -qq
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$dest/root"
cd "$work"
# criu and the libraries its binary asks for, all from trixie so that they agree with its libc.
pkgs=(criu libcompel1 libc6 libprotobuf-c1 libnl-3-200 libnet1 libgnutls30t64 libnftables1
      libbsd0 libuuid1 libcap2 libdrm2 libp11-kit0 libidn2-0 libunistring5 libtasn1-6 libnettle8t64
      libhogweed6t64 libgmp10 libmd0 libjansson4 libmnl0 libnftnl11 libxtables12 libedit2
      libtinfo6 libselinux1 libpcre2-8-0 libffi8 libzstd1 liblzma5 libz1 zlib1g libgcc-s1)
for p in "${pkgs[@]}"; do
    apt-get download -qq "$p/trixie" >/dev/null 2>&1 || true
done
ls ./*.deb >/dev/null 2>&1 || { echo "deps: could not download CRIU packages from trixie" >&2; exit 1; }
for d in ./*.deb; do dpkg -x "$d" "$dest/root"; done
lib=$dest/root/usr/lib/x86_64-linux-gnu
missing=$("$lib/ld-linux-x86-64.so.2" --library-path "$lib:/lib/x86_64-linux-gnu" --list "$dest/root/usr/sbin/criu" | grep "not found" || true)
[ -z "$missing" ] || { echo "deps: CRIU still lacks: $missing" >&2; exit 1; }
cat > "$wrapper" <<'WRAP'
#!/bin/sh
# Runs the private CRIU 4.1 through its own dynamic loader (see scripts/install-criu.sh).
here=$(dirname "$(readlink -f "$0")")
lib=$here/root/usr/lib/x86_64-linux-gnu
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib:/lib/x86_64-linux-gnu" "$here/root/usr/sbin/criu" "$@"
WRAP
chmod +x "$wrapper"
"$wrapper" --version
