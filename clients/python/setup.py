"""Build hook of the ksidecar package: generates the gRPC stubs (ksidecar.v1) from the
repository's proto/ with grpcio-tools, so that nothing generated is committed, and builds
the optional C extension ksidecar._speedups (the per-record path) with the system's C
compiler. Without a compiler or Python's headers the extension is left out (optional=True)
and the package runs its pure-Python path.

The proto directory is KSIDECAR_PROTO_DIR if set, else ../../proto (the repository this
package sits in). The runtime dependencies are pinned to at least the grpcio and protobuf
versions the stubs were generated with: generated code refuses older runtimes.
"""
import importlib.metadata
import importlib.resources
import os
import pathlib

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTOS = ["ksidecar/v1/consumer.proto", "ksidecar/v1/producer.proto"]


def proto_dir():
    for d in (os.environ.get("KSIDECAR_PROTO_DIR"), HERE.parent.parent / "proto"):
        if d and (pathlib.Path(d) / PROTOS[0]).is_file():
            return pathlib.Path(d)
    raise SystemExit("ksidecar: proto/ksidecar/v1/consumer.proto not found: build the package "
                     "from the ksidecar repository (pip install ./clients/python) or set "
                     "KSIDECAR_PROTO_DIR to the repository's proto/ directory")


def generate(out):
    """Writes out/ksidecar/v1/{consumer,producer}_pb2{,_grpc}.py and the messages' _pb2.pyi.
    Raises SystemExit on failure."""
    from grpc_tools import protoc

    wkt = importlib.resources.files("grpc_tools") / "_proto"
    args = ["grpc_tools.protoc", f"-I{proto_dir()}", f"-I{wkt}", f"--python_out={out}",
            f"--pyi_out={out}", f"--grpc_python_out={out}", *PROTOS]
    if protoc.main(args) != 0:
        raise SystemExit(f"ksidecar: grpc_tools.protoc failed: {' '.join(args)}")
    (pathlib.Path(out) / "ksidecar" / "v1" / "__init__.py").touch()


def runtime_requires():
    tools = importlib.metadata.version("grpcio-tools")
    proto = importlib.metadata.version("protobuf")
    return [f"grpcio>={tools}", f"protobuf>={proto}"]


class BuildPy(build_py):
    def run(self):
        super().run()
        generate(self.build_lib)
        if getattr(self, "editable_mode", False):
            generate(str(HERE))


setup(cmdclass={"build_py": BuildPy}, install_requires=runtime_requires(),
      ext_modules=[Extension("ksidecar._speedups", ["ksidecar/_speedups.c"], optional=True)])
