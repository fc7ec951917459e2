# FerretDB v1.24.2 (scripts/ferretdb.sh's build) as an image, for tests and
# the deploy examples: SQLite storage inside the container, telemetry off.
#
#   scripts/image.sh ferretdb        → wirelint-ferretdb:1.24.2
#
# Its address: FERRETDB_LISTEN_ADDR (default 0.0.0.0:27017). It is a test
# backend, not a production database.
ARG BASE=scratch
FROM ${BASE}
COPY rootfs/ /
COPY --chown=65532:65532 state/ /var/lib/ferretdb/
USER 65532:65532
WORKDIR /var/lib/ferretdb
ENV FERRETDB_LISTEN_ADDR=0.0.0.0:27017 \
    FERRETDB_HANDLER=sqlite \
    FERRETDB_SQLITE_URL=file:/var/lib/ferretdb/data/ \
    FERRETDB_STATE_DIR=/var/lib/ferretdb/state \
    FERRETDB_DEBUG_ADDR=127.0.0.1:0 \
    FERRETDB_TELEMETRY=disable
EXPOSE 27017
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/ferretdb"]
