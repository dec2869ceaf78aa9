"""Running host programs (podman, qemu-img, ip, ...) with clear errors. Imports nothing above it."""
