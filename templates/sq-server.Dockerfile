# syntax=docker/dockerfile:1
#
# The SQ server image: static sq-server and sq binaries on distroless,
# running as a non-root user, data in the /data volume.
#
#   docker build -f templates/sq-server.Dockerfile -t sq-server \
#       --build-arg VERSION=$(git describe --always --dirty) .
#   docker run -p 6060:6060 -p 6064:6064 -p 6062:6062 -v sq-data:/data sq-server
#
# The build context is the repository's root. Every flag of sq-server has
# its SQ_* variable (README "Configuration"); the image sets the listeners
# to 0.0.0.0 and the data directory to /data.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first: this layer is reused while go.mod and go.sum stay.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION is what `sq-server --version` and `sq --version` print
# (internal/buildinfo); `make image` passes `git describe`.
ARG VERSION=0.1.0-dev
# Static binaries (no cgo): the runtime image has no C library.
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
        -ldflags "-s -w -X github.com/seedqueue/sq/internal/buildinfo.Version=${VERSION}" \
        -o /out/ ./cmd/sq-server ./cmd/sq \
    && mkdir -p /out/data

# distroless/static: CA certificates, /etc/passwd with the user nonroot
# (65532), no shell and no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sq-server /out/sq /usr/local/bin/
# The volume's mount point belongs to the server's user, so a fresh named
# volume starts writable.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV SQ_GRPC_HOST=0.0.0.0:6060 \
    SQ_CAPNP_HOST=0.0.0.0:6064 \
    SQ_HTTP_HOST=0.0.0.0:6062 \
    SQ_DATA_DIR=/data
VOLUME ["/data"]

# 6060  gRPC control plane: topics, groups, cluster, gRPC publish/subscribe,
#       health and reflection; --seeds of other nodes name this port
EXPOSE 6060
# 6064  Cap'n Proto data plane: producers, consumers, replication
EXPOSE 6064
# 6062  HTTP: /healthz, /readyz, /metrics (Prometheus)
EXPOSE 6062
# 6066  gossip (memberlist) between nodes, TCP and UDP: the gRPC port + 6
EXPOSE 6066/tcp 6066/udp
# 6067  Raft (cluster metadata) between nodes: the gRPC port + 7
EXPOSE 6067

# Ready: storage recovered and, in a cluster, joined and caught up with the
# metadata log (`sq-server probe --ready` asks /readyz on SQ_HTTP_HOST; the
# image has no curl). A node recovering a large log may take longer than
# the start period: it is then reported unhealthy until ready.
HEALTHCHECK --interval=5s --timeout=4s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/sq-server", "probe", "--ready"]

ENTRYPOINT ["/usr/local/bin/sq-server"]
CMD ["serve"]
