"""SHA-256 of an in-memory buffer: portable C (FIPS 180-4), the x86 SHA extensions and the
OpenSSL peer.  Whole files are sha256_file.py."""
from cpulab.workloads import Param, Workload, size_bytes

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
        sweep_axis="size",
    ),
    Workload(
        name="sha256-shani",
        kernel="sha256_shani.c",
        extra_sources=("sha256_core.h",),
        unit="bytes",
        description="SHA-256 of an in-memory buffer with the x86 SHA extensions (skipped without them)",
        params={"size": Param("16384", "size", min=1)},
        memory=size_bytes,
        full={"size": ["64", "1024", "16384", "1048576"]},
        sweep_axis="size",
    ),
    Workload(
        name="sha256-openssl",
        kernel="sha256_openssl.c",
        extra_sources=("sha256_core.h",),
        unit="bytes",
        description="SHA-256 of an in-memory buffer through OpenSSL's EVP interface (the peer)",
        params={"size": Param("16384", "size", min=1)},
        memory=size_bytes,
        full={"size": ["64", "1024", "16384", "1048576"]},
        sweep_axis="size",
        libs=("-lcrypto",),
        requires={"openssl/evp.h": "libssl-dev"},
    ),
]
