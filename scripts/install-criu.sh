#!/usr/bin/env bash
# Debian 12's CRIU 3.17 fails on kernels >= 6.x ("Unexpected rt vDSO area bounds"). Debian 13's
# CRIU 4.1 works but needs glibc 2.38, so its packages (and the libraries it links) are unpacked
# into .deps/criu/root and run through that tree's own dynamic loader by .deps/criu/criu.
# The trixie suite is added to apt with pin priority 100, so nothing else is ever upgraded from it.
#
# .deps/criu/criu is a copy of that criu binary whose ELF interpreter and RPATH name the tree's
# own loader and libraries (patchelf), so that it is exec'd directly: file capabilities apply to
# the file that is exec'd, and a non-root user's CRIU (`--unprivileged`) needs
#   - CAP_CHECKPOINT_RESTORE (kernel >= 5.9), and
#   - CAP_SETPCAP when the capability bounding set is not full (containers): CRIU 4.1's restorer
#     drops every capability missing from the image's bounding set, already absent or not, and
#     PR_CAPBSET_DROP is refused without it ("Unable to drop capability 24: -1").
# The program's own process ids are traced with ordinary same-uid ptrace rights.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$PWD/.deps/criu
bin=$dest/criu
lib=$dest/root/usr/lib/x86_64-linux-gnu

# The capabilities the binary needs on this machine (see above): criu_caps, criu_has_caps,
# criu_grant.
. scripts/criu-caps.sh
has_caps() { criu_has_caps "$bin"; }
is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }

if [ -x "$bin" ] && is_elf "$bin" && "$bin" --version >/dev/null 2>&1 && has_caps; then exit 0; fi

grant() { criu_grant "$bin" .deps/criu/criu "deps: "; }

# The tree is unpacked already (an older layout ran it through a shell wrapper): only the
# directly runnable binary and its capabilities are missing.
if [ -x "$dest/root/usr/sbin/criu" ] && [ -x "$lib/ld-linux-x86-64.so.2" ]; then
    if ! { is_elf "$bin" && "$bin" --version >/dev/null 2>&1; }; then
        tmp=$dest/.criu.$$
        cp "$dest/root/usr/sbin/criu" "$tmp"
        patchelf --set-interpreter "$lib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$lib:/lib/x86_64-linux-gnu" "$tmp"
        "$tmp" --version >/dev/null || { rm -f "$tmp"; echo "deps: the patched CRIU does not run" >&2; exit 1; }
        mv -f "$tmp" "$bin"
    fi
    grant
    exit 0
fi
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
missing=$("$lib/ld-linux-x86-64.so.2" --library-path "$lib:/lib/x86_64-linux-gnu" --list "$dest/root/usr/sbin/criu" | grep "not found" || true)
[ -z "$missing" ] || { echo "deps: CRIU still lacks: $missing" >&2; exit 1; }
# DT_RPATH (not RUNPATH): it also serves the libraries' own dependencies, and it is honoured in
# the secure-execution mode a binary with file capabilities runs in (LD_LIBRARY_PATH is not).
tmp=$dest/.criu.$$
cp "$dest/root/usr/sbin/criu" "$tmp"
patchelf --set-interpreter "$lib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$lib:/lib/x86_64-linux-gnu" "$tmp"
mv -f "$tmp" "$bin"
"$bin" --version
grant
