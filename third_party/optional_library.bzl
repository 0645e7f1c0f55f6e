"""optional_local_library: wraps a system library when its headers are installed, else an empty one.

When `include_path`/`probe` exists, the repository holds cc_library `:<name>` with those headers,
`linkopts`, and the preprocessor symbol `define`; otherwise `:<name>` is an empty library and
code must test `#ifdef <define>`. Nothing is downloaded.
"""

def _optional_local_library_impl(rctx):
    name = rctx.attr.name
    if rctx.path(rctx.attr.include_path + "/" + rctx.attr.probe).exists:
        rctx.symlink(rctx.attr.include_path, "include")
        rctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

cc_library(
    name = "{name}",
    hdrs = glob(["include/**"]),
    includes = ["include"],
    defines = ["{define}"],
    linkopts = {linkopts},
)
""".format(name = name, define = rctx.attr.define, linkopts = repr(rctx.attr.linkopts)))
    else:
        rctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

# {path}/{probe} is absent on this machine: an empty library.
cc_library(name = "{name}")
""".format(name = name, path = rctx.attr.include_path, probe = rctx.attr.probe))

optional_local_library = repository_rule(
    implementation = _optional_local_library_impl,
    attrs = {
        "include_path": attr.string(mandatory = True),
        "probe": attr.string(mandatory = True),
        "define": attr.string(mandatory = True),
        "linkopts": attr.string_list(),
    },
    local = True,
)
