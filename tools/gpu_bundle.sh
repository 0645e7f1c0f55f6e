#!/usr/bin/env bash
# tools/gpu_bundle.sh — packs the GPU binaries for a CUDA host that has no Bazel.
#
#   tools/gpu_bundle.sh DIR [--with-openmpi] [TARGET...]
#
# Builds the parity tests (and any extra Bazel targets given), copies the binaries into DIR/bin
# and the shared libraries a stock CUDA image may lack (cJSON, PCRE2) into DIR/lib. An extra
# target //pkg/dir:name is copied as DIR/bin/dir_name (//gpu:train → gpu_train, //ref:train →
# ref_train; an alias is copied from the target it names). On the GPU host, from the repository root: tools/run_parity.sh DIR [--bench], the
# trainer's parity
#   tests/parity/train_parity.sh DIR/bin/ref_train DIR/bin/gpu_train DIR/bin/parity_train_compare
# (after tools/gpu_bundle.sh DIR //gpu:train //gpu:bench //ref:train //tests/parity:train_compare),
# or any DIR/bin/<name> with LD_LIBRARY_PATH=DIR/lib. The CUDA runtime is linked statically;
# cuBLASLt comes from the host's toolkit.
#
# Several GPUs (README, "Several GPUs"): the MPI plugin librefine_mpi.so goes beside the binaries
# in DIR/bin (the trainers load it from there under mpirun), and DIR/mpi_env.sh, sourced on the
# GPU host, provides mpirun and NCCL: the host's mpirun if it has one, else (with --with-openmpi
# here: Debian's Open MPI runtime, ~6 MB of .deb files downloaded by apt-get into
# DIR/openmpi-debs) the packages unpacked with dpkg -x into DIR/openmpi and used from there
# (OPAL_PREFIX, PATH, LD_LIBRARY_PATH); NCCL from the system, the toolkit, or Python's
# nvidia-nccl package (REFINE_NCCL_LIBRARY). tools/multi_gpu.sh sources it.
set -euo pipefail
usage="usage: tools/gpu_bundle.sh DIR [--with-openmpi] [TARGET...]"
dir=${1:?$usage}
shift
openmpi=0
if [ "${1:-}" = --with-openmpi ]; then
    openmpi=1
    shift
fi
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
cd "$(dirname "$0")/.."
bazel build //tests/parity/... //trainers:librefine_mpi.so "$@"
mkdir -p "$dir/bin" "$dir/lib"
for t in bazel-bin/tests/parity/*_parity; do
    # the parity binaries (train_parity is a script that takes the trainers: see below)
    [ -f "$t" ] && [ -x "$t" ] && [ "$(head -c 4 "$t" | od -An -c | tr -d ' ')" = '177ELF' ] && cp -fL "$t" "$dir/bin/"
done
for target in "$@"; do
    pkg=${target#//}
    pkg=${pkg%%:*}
    name=${target##*:}
    # an alias (//gpu:train → //trainers:gpu_train) is copied from its actual target's output
    actual=$(bazel query "labels(actual, $target)" 2>/dev/null | head -1)
    file=${actual:-$target}
    file=${file#//}
    cp -fL "bazel-bin/${file%%:*}/${file##*:}" "$dir/bin/${pkg##*/}_$name"
done
for lib in libcjson.so.1 libpcre2-8.so.0; do
    src=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
    [ -n "$src" ] && cp -fL "$src" "$dir/lib/"
done
cp -fL bazel-bin/trainers/librefine_mpi.so "$dir/bin/"
if [ $openmpi -eq 1 ]; then
    mkdir -p "$dir/openmpi-debs"
    # Open MPI 4.1's runtime and what its components load (the host has libc, libstdc++, zlib, udev)
    for p in openmpi-bin libopenmpi3 openmpi-common libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 \
        libhwloc-plugins libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libpsm2-2 \
        libpsm-infinipath1 libnuma1 libxnvctrl0 libpciaccess0 libmunge2; do
        (cd "$dir/openmpi-debs" && apt-get download "$p" >/dev/null) || { echo "gpu_bundle: apt-get download $p failed" >&2; exit 1; }
    done
fi
cat >"$dir/mpi_env.sh" <<'ENV'
# mpi_env.sh — source it on the GPU host (bash): mpirun and NCCL for this bundle's programs.
# The host's mpirun if there is one, else Debian's Open MPI unpacked from openmpi-debs/ (dpkg -x,
# once) and run from here; NCCL as the host has it, else Python's nvidia-nccl package.
_b=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none
export OMPI_MCA_btl_base_warn_component_unused=0
if ! command -v mpirun >/dev/null 2>&1 && [ -d "$_b/openmpi-debs" ]; then
    if [ ! -x "$_b/openmpi/usr/bin/orterun" ]; then
        mkdir -p "$_b/openmpi"
        for _f in "$_b"/openmpi-debs/*.deb; do dpkg -x "$_f" "$_b/openmpi"; done
        ln -sf orterun "$_b/openmpi/usr/bin/mpirun"
    fi
    export OPAL_PREFIX=$_b/openmpi/usr PATH=$_b/openmpi/usr/bin:$PATH
    export LD_LIBRARY_PATH=$_b/openmpi/usr/lib/x86_64-linux-gnu:$_b/openmpi/usr/lib/x86_64-linux-gnu/openmpi/lib:${LD_LIBRARY_PATH:-}
fi
if [ -z "${REFINE_NCCL_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 ' &&
    [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ]; then
    _n=$(python3 -c 'import nvidia.nccl as n, os; print(os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
    [ -n "$_n" ] && [ -e "$_n" ] && export REFINE_NCCL_LIBRARY=$_n
fi
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} # no NVLink multicast
command -v mpirun >/dev/null 2>&1 || echo "mpi_env.sh: no mpirun here (bundle with --with-openmpi)" >&2
ENV
du -sh "$dir"
