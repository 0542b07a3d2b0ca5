"""The generated gRPC stubs (ksidecar.v1), with a clear error when the package was not built."""
try:
    from ksidecar.v1 import consumer_pb2 as pb
    from ksidecar.v1 import consumer_pb2_grpc as pb_grpc
    from ksidecar.v1 import producer_pb2 as ppb
    from ksidecar.v1 import producer_pb2_grpc as ppb_grpc
except ImportError as e:  # pragma: no cover - a source tree that was never built
    raise ImportError(
        "ksidecar: the generated gRPC stubs (ksidecar.v1) are missing; they are made when the "
        "package is built: pip install ./clients/python from the ksidecar repository") from e

__all__ = ["pb", "pb_grpc", "ppb", "ppb_grpc"]
