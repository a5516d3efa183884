#!/usr/bin/env bash
# `make install PREFIX=... [DESTDIR=...]`: installs mpicr from a built tree (`make build`):
#
#   PREFIX/bin/mpicr                       the command (keeper, coordinator, CRIU driver)
#   PREFIX/bin/mpicrcc, mpicrcxx, mpicrfort  wrapper compilers (libmpicr.so linked first)
#   PREFIX/lib/libmpicr.so                 the shim, MPICH ABI
#   PREFIX/lib/libmpicr_ompi.so            the shim's Open MPI face
#   PREFIX/lib/libmpicr_abi.so             the shim's MPI-5 standard-ABI face
#   PREFIX/lib/pkgconfig/mpicr.pc
#   PREFIX/include/mpicr.h                 the C API
#   PREFIX/libexec/mpicr/criu              mpicr's private CRIU, with the libraries it runs on in
#   PREFIX/libexec/mpicr/criu-lib/         (its ELF interpreter and RPATH name them)
#   PREFIX/libexec/mpicr/criu-wt           the write-tracking CRIU of `mpicr run --incremental`
#                                          (`make deps-incremental` builds it; absent: none)
#   PREFIX/share/man/man1/mpicr.1, mpicr-SUBCOMMAND.1   generated from the CLI definition
#   PREFIX/share/bash-completion/completions/mpicr, share/zsh/site-functions/_mpicr,
#   PREFIX/share/fish/vendor_completions.d/mpicr.fish
#   PREFIX/share/modulefiles/mpicr/VERSION  an environment-modules (Tcl; Lmod reads it) file
#   PREFIX/share/doc/mpicr/                 README.md, the sbatch example
#
# `mpicr` finds libmpicr.so in ../lib and its CRIU in ../libexec/mpicr relative to itself:
# nothing of the source tree is needed. CRIU's loader path is absolute (an ELF interpreter
# cannot be relative), so a moved prefix needs MPICR_CRIU or a new `make install`.
# CRIU comes from CRIU_TREE (default .deps/criu, which `make deps` fills: root/usr/sbin/criu and
# root/usr/lib/x86_64-linux-gnu), or CRIU=/path/to/criu copies that binary as is; CRIU=none
# installs none (mpicr then uses MPICR_CRIU, or criu on PATH). As root, the installed CRIU
# gets the file capabilities a non-root user's checkpoints need (scripts/criu-caps.sh).
# The write-tracking CRIU comes from CRIU_WT (default .deps/criu-wt/criu; CRIU_WT=none: none);
# it runs on the system's libraries, as built.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

prefix=${PREFIX:-/usr/local}
case $prefix in /*) ;; *) echo "install: PREFIX must be an absolute path (got $prefix)" >&2; exit 2 ;; esac
prefix=${prefix%/}
dest=${DESTDIR:-}${prefix}
target=${TARGET_DIR:-$root/target/release}
criu_tree=${CRIU_TREE:-$root/.deps/criu}
criu_bin=${CRIU:-}
criu_wt=${CRIU_WT:-$root/.deps/criu-wt/criu}

for f in mpicr libmpicr.so libmpicr_ompi.so libmpicr_abi.so; do
    [ -f "$target/$f" ] || { echo "install: $target/$f is missing: run \`make build\` first" >&2; exit 1; }
done
version=$("$target/mpicr" --version | awk '{print $2}')

say() { echo "install: $*"; }
d() { install -d -m 755 "$@"; }

d "$dest/bin" "$dest/lib/pkgconfig" "$dest/include" "$dest/libexec/mpicr" "$dest/share/man/man1" \
    "$dest/share/bash-completion/completions" "$dest/share/zsh/site-functions" \
    "$dest/share/fish/vendor_completions.d" "$dest/share/modulefiles/mpicr" "$dest/share/doc/mpicr"

install -m 755 "$target/mpicr" "$dest/bin/mpicr"
install -m 755 "$target/libmpicr.so" "$target/libmpicr_ompi.so" "$target/libmpicr_abi.so" "$dest/lib/"
install -m 644 include/mpicr.h "$dest/include/"
install -m 755 scripts/mpicrcc "$dest/bin/mpicrcc"
ln -sf mpicrcc "$dest/bin/mpicrcxx"
ln -sf mpicrcc "$dest/bin/mpicrfort"

# --- CRIU --------------------------------------------------------------------------------------
rm -rf "$dest/libexec/mpicr/criu" "$dest/libexec/mpicr/criu-lib"
if [ "$criu_bin" = none ]; then
    say "no CRIU installed (CRIU=none): mpicr uses \$MPICR_CRIU or criu on PATH"
elif [ -n "$criu_bin" ]; then
    install -m 755 "$criu_bin" "$dest/libexec/mpicr/criu"
elif [ -x "$criu_tree/root/usr/sbin/criu" ]; then
    command -v patchelf >/dev/null || { echo "install: patchelf is needed to install CRIU (make deps installs it)" >&2; exit 1; }
    tree_lib=$criu_tree/root/usr/lib/x86_64-linux-gnu
    d "$dest/libexec/mpicr/criu-lib"
    # the libraries CRIU and its loader need (not the tree's compilers' or locales' files)
    find "$tree_lib" -maxdepth 1 \( -type f -o -type l \) -name '*.so*' -exec cp -a {} "$dest/libexec/mpicr/criu-lib/" \;
    cp "$criu_tree/root/usr/sbin/criu" "$dest/libexec/mpicr/criu"
    # The final paths (not DESTDIR's): DT_RPATH, honoured in the secure-execution mode that a
    # binary with file capabilities runs in, where $ORIGIN and LD_LIBRARY_PATH are not.
    final_lib=$prefix/libexec/mpicr/criu-lib
    patchelf --set-interpreter "$final_lib/ld-linux-x86-64.so.2" --force-rpath \
        --set-rpath "$final_lib:/lib/x86_64-linux-gnu" "$dest/libexec/mpicr/criu"
    chmod 755 "$dest/libexec/mpicr/criu"
    if [ -z "${DESTDIR:-}" ]; then
        "$dest/libexec/mpicr/criu" --version >/dev/null || { echo "install: the installed CRIU does not run" >&2; exit 1; }
    fi
else
    say "no CRIU in $criu_tree (make deps puts one there; or CRIU=/path/to/criu, CRIU=none)" >&2
    exit 1
fi
rm -f "$dest/libexec/mpicr/criu-wt"
if [ "$criu_wt" != none ] && [ -x "$criu_wt" ]; then
    install -m 755 "$criu_wt" "$dest/libexec/mpicr/criu-wt"
elif [ "$criu_wt" != none ]; then
    say "no write-tracking CRIU ($criu_wt; \`make deps-incremental\` builds it): --incremental needs soft-dirty bits then"
fi
if [ "$(id -u)" -eq 0 ] && command -v setcap >/dev/null; then
    . scripts/criu-caps.sh
    for c in criu criu-wt; do
        if [ -f "$dest/libexec/mpicr/$c" ]; then
            criu_grant "$dest/libexec/mpicr/$c" "$prefix/libexec/mpicr/$c" "install: "
        fi
    done
fi

# --- pkg-config, man pages, completions, module file, docs -----------------------------------
cat > "$dest/lib/pkgconfig/mpicr.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: mpicr
Description: Transparent checkpoint/restart for MPI programs (libmpicr.so, linked ahead of the MPI library)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -Wl,--no-as-needed -lmpicr
PC

gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
"$target/mpicr" gen-docs --man "$gen/man" --completions "$gen/completions" >/dev/null
install -m 644 "$gen"/man/*.1 "$dest/share/man/man1/"
install -m 644 "$gen/completions/bash/mpicr" "$dest/share/bash-completion/completions/mpicr"
install -m 644 "$gen/completions/zsh/_mpicr" "$dest/share/zsh/site-functions/_mpicr"
install -m 644 "$gen/completions/fish/mpicr.fish" "$dest/share/fish/vendor_completions.d/mpicr.fish"

cat > "$dest/share/modulefiles/mpicr/$version" <<MOD
#%Module1.0
## mpicr $version: transparent checkpoint/restart for MPI programs
proc ModulesHelp { } {
    puts stderr "mpicr $version: mpicr run/checkpoint/restart/status, mpicrcc/mpicrcxx/mpicrfort"
}
module-whatis "mpicr $version: transparent checkpoint/restart for MPI programs"
set root $prefix
setenv MPICR_ROOT \$root
prepend-path PATH \$root/bin
prepend-path MANPATH \$root/share/man
prepend-path PKG_CONFIG_PATH \$root/lib/pkgconfig
prepend-path CPATH \$root/include
MOD

install -m 644 README.md "$dest/share/doc/mpicr/README.md"
[ -f packaging/sbatch-example.sh ] && install -m 644 packaging/sbatch-example.sh "$dest/share/doc/mpicr/"

say "mpicr $version into ${DESTDIR:+$DESTDIR}$prefix"
