# migkit's images for Docker or Podman users (docs/deploy.md). Equivalent to
# scripts/build-image, which builds the same images here without a container
# engine: the same package list (deploy/image/packages.txt), extracted the same
# way (apt resolves the dependencies, dpkg-deb extracts, no dpkg or apt in the
# image), the same deploy/image/hooks/extract-dpkg-status and
# deploy/image/finish-rootfs, and the same image config (keep the ENV, USER,
# CMD and LABEL lines in step with scripts/build-image's `umoci config`).
# Named Dockerfile, the name both `docker build` and `podman build` look for.
#
#   docker build -t migkit:0.1.0 .                        (production image)
#   docker build --target demo -t migkit-demo:0.1.0 .     (with the NVML simulator)
#   podman build -t migkit:0.1.0 .                        (the same arguments)
# MIGKIT_VERSION must be the project() version of CMakeLists.txt
# (tests/package/test-image.sh checks it).
#
# What a build needs besides this tree: the base image BASE_IMAGE
# (debian:bookworm, pulled unless it is in the local image store) and a Debian
# bookworm mirror for the two apt-get stages (the base image's apt sources).
# Offline: load a base image beforehand (`docker pull debian:bookworm` where
# there is a network, then `docker save`/`docker load`), and give apt a mirror
# it can reach, e.g. a base image made from a local mirror with
#   mmdebstrap bookworm - http://mirror.internal/debian | docker import - debian:bookworm-local
#   docker build --build-arg BASE_IMAGE=debian:bookworm-local -t migkit:0.1.0 .

ARG BASE_IMAGE=debian:bookworm
ARG MIGKIT_VERSION=0.1.0

# --- build: migkit from this source tree ------------------------------------
FROM ${BASE_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake ninja-build pkg-config git \
      libyaml-dev libjansson-dev libcmocka-dev libcurl4-openssl-dev libmicrohttpd-dev \
      libgrpc-dev libprotobuf-c-dev protobuf-c-compiler \
 && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
 && cmake --build /build \
 && DESTDIR=/out/migkit cmake --install /build --prefix /usr --strip \
 && DESTDIR=/out/migkit cmake --install /build --prefix /usr --component image \
 && DESTDIR=/out/sim cmake --install /build --prefix /usr --component sim --strip \
 && ln -s ../lib/migkit/bin/nvidia-smi /out/sim/usr/bin/nvidia-smi

# --- rootfs: the Debian packages of deploy/image/packages.txt, extracted ------
FROM ${BASE_IMAGE} AS rootfs
COPY deploy/image/ /image/
# An empty dpkg status makes apt download every package of the list and all
# their dependencies (as mmdebstrap --variant=extract does).
RUN apt-get update \
 && mkdir -p /rootfs/var/cache/apt/archives/partial /tmp/empty \
 && : >/tmp/empty/status \
 && apt-get install -y --download-only --no-install-recommends \
      -o Dir::State::status=/tmp/empty/status -o Dir::Cache::archives=/rootfs/var/cache/apt/archives \
      $(sed 's/#.*//' /image/packages.txt) \
 && for deb in /rootfs/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" /rootfs; done \
 && /image/hooks/extract-dpkg-status /rootfs \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/migkit/ /rootfs/
RUN /image/finish-rootfs /rootfs

# --- production image -----------------------------------------------------------
FROM scratch AS production-base
ARG MIGKIT_VERSION
COPY --from=rootfs /rootfs/ /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /
# Root by default: the node parts (manager, device plugin, feature discovery)
# need it; the scheduler extender runs as uid 65532 (runAsUser in its manifest).
USER 0:0
LABEL org.opencontainers.image.title=migkit \
      org.opencontainers.image.version=${MIGKIT_VERSION} \
      org.opencontainers.image.source=migkit \
      org.opencontainers.image.description="MIG partitioning toolkit: CLI, node service, MIG manager, device plugin, scheduler extender"
# The GPU Operator's MIG manager DaemonSet sets no command (docs/gpu-operator.md).
CMD ["nvidia-mig-manager"]

# --- demo image: the production image + the NVML simulator (never in production)
FROM production-base AS demo
COPY --from=build /out/sim/ /
ENV MIGKIT_NVML_LIB=/usr/lib/migkit/sim/libnvidia-ml.so.1 \
    MIGKIT_NVIDIA_SMI=/usr/lib/migkit/bin/nvidia-smi \
    MIGKIT_SIM_MACHINE=dgx-a100 \
    MIGKIT_SIM_STATE=/tmp/migkit-sim.json
LABEL org.opencontainers.image.title=migkit-demo \
      org.opencontainers.image.description="migkit with the NVML simulator (a simulated DGX A100; not for production)"

# The default target (last stage): the production image.
FROM production-base AS production
