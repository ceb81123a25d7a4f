# The flashcache image: one binary that runs as the operator (non-root) or the node agent (root,
# it needs the devices), on Debian bookworm with exactly the packages that provide the commands
# the engine runs (operator/internal/blockdev/tools.go).
#
# Build with `make image`; it needs BuildKit (DOCKER_BUILDKIT=1) for the cache mounts.
#
# The base images are pinned by exact tag, not by digest: hack/build-base-images.sh imports
# them locally from a Debian rootfs and the Go module proxy's toolchain (no registry is
# reachable where this project is built), so a registry digest could never match. The script
# reads these two lines, so they are the one place the versions are set.
ARG GO_IMAGE=golang:1.26.8-bookworm
ARG BASE_IMAGE=debian:bookworm-20250520-slim

FROM ${GO_IMAGE} AS builder
WORKDIR /src/operator
ENV CGO_ENABLED=0 GOFLAGS=-mod=readonly
# Modules first, so that a code change reuses the downloaded modules' layer. The optional
# secret host-ca is the build host's CA bundle (`make image` passes it): where egress goes
# through a TLS-intercepting proxy, only the host knows its CA. As a secret it is in no layer.
COPY operator/go.mod operator/go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
	--mount=type=secret,id=host-ca \
	if [ -s /run/secrets/host-ca ]; then export SSL_CERT_FILE=/run/secrets/host-ca; fi \
	&& go mod download
COPY operator/ ./
ARG VERSION=dev
ARG COMMIT=
# `make build`'s flags, and -trimpath: the image's binary names no build folder. The cache mounts
# keep the compiled packages between builds.
RUN --mount=type=cache,target=/go/pkg/mod \
	--mount=type=cache,target=/root/.cache/go-build \
	go build -trimpath \
	-ldflags "-s -w -X github.com/flashcache/flashcache/operator/internal/version.Version=${VERSION} -X github.com/flashcache/flashcache/operator/internal/version.Commit=${COMMIT}" \
	-o /out/flashcache ./cmd \
	&& /out/flashcache node tools --packages=debian >/out/packages.txt

FROM ${BASE_IMAGE}
# The package list comes from the engine's own tool table, so the image cannot miss a command
# the engine runs nor carry one it does not. Copied alone, it keeps this layer cached until the
# list itself changes.
COPY --from=builder /out/packages.txt /usr/share/flashcache/packages.txt
RUN apt-get update \
	&& xargs --arg-file=/usr/share/flashcache/packages.txt \
	env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
	&& apt-get clean \
	&& rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log
# The chart runs the operator with runAsNonRoot and runAsUser 65532, and the agent as root; a
# named user for that uid keeps tools that look up the user (and humans reading ps) happy.
RUN groupadd --system --gid 65532 nonroot \
	&& useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
	--shell /usr/sbin/nologin nonroot
COPY --from=builder /out/flashcache /usr/local/bin/flashcache

ARG VERSION=dev
ARG COMMIT=
LABEL org.opencontainers.image.title="flashcache" \
	org.opencontainers.image.description="Kubernetes operator and node agent that build bcache flash-cached block devices" \
	org.opencontainers.image.source="https://github.com/flashcache/flashcache" \
	org.opencontainers.image.version="${VERSION}" \
	org.opencontainers.image.revision="${COMMIT}"
ENTRYPOINT ["/usr/local/bin/flashcache"]
