"""Offline stand-in for @rules_proto//proto:defs.bzl: each rule is Bazel's native one."""

def proto_library(**attrs):
    native.proto_library(**attrs)

def proto_lang_toolchain(**attrs):
    native.proto_lang_toolchain(**attrs)
