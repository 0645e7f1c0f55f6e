"""cuda_library: compiles .cu files with nvcc into a library that cc_* targets link.

    load("//third_party:cuda_library.bzl", "cuda_library")
    cuda_library(
        name = "rmsnorm",
        srcs = ["rmsnorm.cu"],
        hdrs = ["rmsnorm.h"],
        deps = ["//gpu:cuda_check"],
    )

Each .cu becomes one object, compiled as C++17 with -O3 and -lineinfo, with one
`-gencode=arch=compute_XX,code=sm_XX` per architecture in `archs` (default sm_80 and sm_90a;
`--define=cuda_archs=sm_90a,sm_80` overrides it for the whole build). The headers of `hdrs`
and of every dep (their CcInfo) are inputs of the compile action, with their include paths, so
an edited header recompiles exactly what includes it. `--define=refine_sync=1` (`--config=sync`)
adds -DREFINE_SYNC_LAUNCH=1. The objects then sit in a cc_library together with `hdrs`,
`deps` and the static CUDA runtime.
"""

DEFAULT_ARCHS = ["sm_80", "sm_90a"]

def _gencode(arch):
    if not arch.startswith("sm_"):
        fail("cuda arch must look like sm_90a, got '%s'" % arch)
    num = arch[len("sm_"):]
    return "-gencode=arch=compute_%s,code=sm_%s" % (num, num)

def _cuda_objects_impl(ctx):
    cc_info = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps])
    comp = cc_info.compilation_context
    headers = depset(ctx.files.hdrs, transitive = [comp.headers])

    archs = ctx.attr.archs
    if "cuda_archs" in ctx.var:
        archs = ctx.var["cuda_archs"].split(",")

    flags = [
        "-std=c++17",
        "-O3",
        "-lineinfo",
        "-Xcompiler=-fPIC",
        "-Xcompiler=-Wall",
        "-Werror=all-warnings",
        "--expt-relaxed-constexpr",
    ] + [_gencode(a) for a in archs]
    flags += ["-I.", "-I" + ctx.bin_dir.path, "-I" + ctx.genfiles_dir.path]
    for inc in comp.includes.to_list():
        flags.append("-I" + inc)
    for inc in comp.quote_includes.to_list():
        flags.append("-I" + inc)
    for inc in comp.system_includes.to_list():
        flags.append("-isystem=" + inc)
    for d in comp.defines.to_list():
        flags.append("-D" + d)
    if ctx.var.get("refine_sync", "0") == "1":
        flags.append("-DREFINE_SYNC_LAUNCH=1")
    flags += ctx.attr.copts

    objects = []
    for src in ctx.files.srcs:
        if src.extension != "cu":
            continue
        obj = ctx.actions.declare_file("_cuda_objs/%s/%s.o" % (ctx.label.name, src.basename[:-len(".cu")]))
        ctx.actions.run(
            executable = ctx.attr._nvcc_path,
            arguments = flags + ["-c", src.path, "-o", obj.path],
            inputs = depset([src] + [s for s in ctx.files.srcs if s.extension != "cu"], transitive = [headers]),
            outputs = [obj],
            mnemonic = "NvccCompile",
            progress_message = "Compiling CUDA %s" % src.short_path,
            use_default_shell_env = True,
        )
        objects.append(obj)
    return [DefaultInfo(files = depset(objects))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu", ".cuh"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "archs": attr.string_list(default = DEFAULT_ARCHS),
        "copts": attr.string_list(),
        # nvcc finds cicc, ptxas and libdevice relative to the path it is started from, so it runs
        # from the toolkit itself (the path of @cuda in WORKSPACE), not from a symlink in the sandbox.
        "_nvcc_path": attr.string(default = "/usr/local/cuda/bin/nvcc"),
    },
)

def cuda_library(name, srcs, hdrs = [], deps = [], archs = DEFAULT_ARCHS, copts = [], **kwargs):
    """A cc_library whose objects nvcc compiled from `srcs` (.cu, plus private .cuh)."""
    _cuda_objects(
        name = name + "_cuda_objects",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:headers"],
        archs = archs,
        copts = copts,
        visibility = ["//visibility:private"],
        tags = kwargs.get("tags", []),
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_cuda_objects"],
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        **kwargs
    )
