"""SHA-256 of an in-memory buffer: the first workload, portable C (FIPS 180-4)."""
from . import Param, Workload, size_bytes

WORKLOADS = [
    Workload(
        name="sha256",
        kernel="sha256.c",
        extra_sources=("sha256_core.h",),
        unit="bytes",
        description="SHA-256 of an in-memory buffer, portable C (FIPS 180-4)",
        params={"size": Param("16384", "size", min=1)},
        memory=size_bytes,
        full={"size": ["64", "1024", "16384", "1048576"]},
    ),
]
