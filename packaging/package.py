# Spack package for mpicr. Copy this directory's package.py into a Spack repository of your own
# as packages/mpicr/package.py (`spack repo create`, `spack repo add`), then `spack install mpicr`.

from spack.package import *


class Mpicr(MakefilePackage):
    """Transparent checkpoint/restart for unmodified MPI programs.

    libmpicr.so interposes every MPI function of the MPICH ABI; the mpicr command runs each rank
    under a keeper (started by mpiexec or srun), coordinates checkpoints, drives CRIU and
    restarts jobs, also under another launcher. mpicrcc/mpicrcxx/mpicrfort link the shim ahead
    of the MPI library.

    CRIU: Spack has no CRIU package, and CRIU needs the kernel's checkpoint support and (for
    non-root users) file capabilities, which a site installs as root. This package installs
    without one (CRIU=none): mpicr then runs $MPICR_CRIU, else the criu on PATH (CRIU >= 4.0;
    3.17 fails on kernels >= 6.x). The variant +bundled_criu instead copies the CRIU binary
    named by the criu_path variant into libexec/mpicr.
    """

    # mpicr has no public home yet: point `git` at the repository you build from (a clone on a
    # shared file system works: "file:///path/to/mpicr").
    homepage = "https://example.org/mpicr"
    git = "file:///opt/src/mpicr"

    license("MIT OR Apache-2.0")

    version("main", branch="main")

    variant("bundled_criu", default=False, description="Copy a CRIU binary into libexec/mpicr")
    variant(
        "criu_path",
        default="/usr/sbin/criu",
        values=lambda x: True,
        description="The CRIU binary +bundled_criu copies",
    )

    # The crates come from crates.io at build time (cargo); rust-version of the newest
    # dependency (clap_mangen) is 1.85.
    depends_on("rust@1.85:", type="build")
    depends_on("c", type="build")  # the shim's anchor library (shim/anchor/anchor.c)
    # The MPI library underneath is found at run time: the one the program is linked to, or
    # MPICR_MPI_LIB; it must be an MPICH-ABI one (MPICH 4/5, Intel MPI). Open MPI programs
    # run on it through libmpicr_ompi.so, standard-ABI programs through libmpicr_abi.so.
    depends_on("mpich@4:", type="run")

    build_targets = ["build"]

    def edit(self, spec, prefix):
        pass

    def install(self, spec, prefix):
        criu = "none"
        if spec.satisfies("+bundled_criu"):
            criu = spec.variants["criu_path"].value
        make("install", "PREFIX={0}".format(prefix), "CRIU={0}".format(criu))

    def setup_run_environment(self, env):
        env.set("MPICR_ROOT", self.prefix)
        env.prepend_path("PKG_CONFIG_PATH", self.prefix.lib.pkgconfig)

    @run_after("install")
    @on_package_attributes(run_tests=True)
    def check_install(self):
        mpicr = Executable(self.prefix.bin.mpicr)
        mpicr("--version")
        mpicr("completions", "bash", output=str)
